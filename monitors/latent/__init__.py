"""Latents: shape, family guessed from channels and rank, the decoded size it implies, statistics
and the latent step.
"""
