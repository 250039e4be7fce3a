"""Shared pieces of the PipelineMonitorVAEEncode tests: the tiny WAN 2.1 VAE and a node runner."""

from __future__ import annotations

from conftest import load_script

NODE = "PipelineMonitorVAEEncode"


def load_tiny_wan_vae(base: str):
    """The tiny WAN 2.1 VAE file of scripts/make_tiny_models.py (written under base), loaded as
    VAELoader loads it. ComfyUI must be imported first (the `comfy` fixture)."""
    import comfy.sd
    import comfy.utils

    paths = load_script("make_tiny_models").make_tiny_models(base)
    sd, metadata = comfy.utils.load_torch_file(paths["vae"], return_metadata=True)
    return comfy.sd.VAE(sd=sd, metadata=metadata)


def noise_image(frames=1, height=64, width=64, channels=3, seed=0):
    import torch

    generator = torch.Generator().manual_seed(seed)
    return torch.rand(frames, height, width, channels, generator=generator)


def run_node(comfy, runtime, node_id="21", **inputs):
    """Execute the node inside a run; returns (NodeOutput or the exception raised, step dict or None)."""
    node = comfy.nodes.NODE_CLASS_MAPPINGS[NODE]
    runtime.recorder.begin_run(f"pm-vae-{node_id}", None)
    try:
        output = node.PREPARE_CLASS_CLONE({"hidden_inputs": {"UNIQUE_ID": node_id}}).execute(**inputs)
    except Exception as exc:
        output = exc
    except BaseException as exc:  # ComfyUI 0.33's InterruptProcessingException is a BaseException
        if type(exc).__name__ != "InterruptProcessingException":
            raise
        output = exc
    report = runtime.recorder.end_run("success").to_dict()
    steps = [s for s in report["steps"] if s["kind"] == "vae_encode"]
    assert len(steps) <= 1
    return output, (steps[0] if steps else None)


def core_encode(comfy, vae, pixels):
    return comfy.nodes.NODE_CLASS_MAPPINGS["VAEEncode"]().encode(vae, pixels)[0]["samples"]


def core_encode_tiled(comfy, vae, pixels, tile_size=512, overlap=64, temporal_size=64, temporal_overlap=8):
    node = comfy.nodes.NODE_CLASS_MAPPINGS["VAEEncodeTiled"]()
    return node.encode(vae, pixels, tile_size, overlap, temporal_size, temporal_overlap)[0]["samples"]


def vae_state(vae):
    """What the CPU strategy must leave as it found it: devices, patcher, module, dtype, the weights
    (address, device, dtype), the per-operation cast flags of its layers, and no clone left loaded."""
    import comfy.model_management as mm

    return {
        "device": vae.device,
        "patcher": vae.patcher,
        "load_device": vae.patcher.load_device,
        "offload_device": vae.patcher.offload_device,
        "module": vae.first_stage_model,
        "dtype": vae.vae_dtype,
        "params": [(p.data_ptr(), p.device, p.dtype) for p in vae.first_stage_model.parameters()],
        "cast_flags": [
            (name, layer.__dict__.get("comfy_cast_weights"), "prev_comfy_cast_weights" in layer.__dict__)
            for name, layer in vae.first_stage_model.named_modules()
            if hasattr(layer, "comfy_cast_weights")
        ],
        "clones_loaded": [
            m
            for m in mm.current_loaded_models
            if m.model is not None and m.model is not vae.patcher and m.model.is_clone(vae.patcher)
        ],
    }
