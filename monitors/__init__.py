"""Pipeline Monitor's monitoring library: probes, spans, sampler, analysers, reports.

Plain Python over torch, psutil, nvidia-ml-py, numpy and safetensors; never imports ComfyUI.
"""
