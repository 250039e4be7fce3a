"""What ComfyUI had loaded when a VAE encode ran out of memory (monitors/models/loaded.py reads it)."""

from __future__ import annotations

from ..monitors.models import loaded


def loaded_models_snapshot() -> dict:
    import comfy.model_management as mm

    device = mm.get_torch_device()
    return loaded.loaded_models_snapshot(
        list(mm.current_loaded_models), device, lambda: mm.get_free_memory(device)
    )
