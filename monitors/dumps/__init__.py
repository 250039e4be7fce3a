"""Tensor dumps: collecting tensors from CONDITIONING / LATENT / IMAGE values, safetensors files
with strict names, and comparisons between dumps.
"""
