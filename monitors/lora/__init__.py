"""LoRA application: the file's header and keys, key coverage with ComfyUI's own key map,
exact weight-change norms without materialising, and the before/after of MODEL and CLIP.
"""
