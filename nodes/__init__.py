"""ComfyUI adapters: the only part of the pack that imports ComfyUI."""
