"""VAE encoding: the strategy chain that survives running out of memory, geometry and tiling,
and the vae_encode step built from the chain's attempts.
"""
