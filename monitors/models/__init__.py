"""Models: what MODEL / CLIP / VAE objects are (class, device, dtype, sizes, patches) and the
models step.
"""
