"""A plain-Python diffusion-style pipeline on CPU, profiled with the Pipeline Monitor decorators.

Text encoding -> a denoising loop -> a block-wise video decode, with tiny random torch modules (no
download, a few seconds on a laptop CPU). Writes a JSON report, an HTML report and a
Chrome/Perfetto trace for each generation, then logs the usage statistics.

    python example_pipelines/plain_pipeline.py                       # from the pack folder
    python example_pipelines/plain_pipeline.py --preset production --generations 3
    python example_pipelines/plain_pipeline.py --profiling_config my_profiling.yaml --output-dir reports/
    python example_pipelines/plain_pipeline.py --no-enable_profiling     # the same run, not profiled
    torchrun --nproc-per-node 2 example_pipelines/plain_pipeline.py  # one report per rank, then:
    python -m monitors aggregate reports/*-rank*.json -o job.json
"""

from __future__ import annotations

import argparse
import logging
import os
import sys

import torch
from torch import nn

# The pack folder holds the `monitors` package; a script in example_pipelines/ does not see it by itself.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from monitors import pipeline_profiler as pm  # noqa: E402
from monitors.pipeline_profiler.inferix import add_profiling_arguments, configure_from_args  # noqa: E402

log = logging.getLogger("plain_pipeline")

VOCAB, HIDDEN, LATENT_CHANNELS, LATENT_SIZE = 1000, 64, 4, 16
FRAMES, FRAMES_PER_BLOCK, UPSCALE = 8, 2, 4


class TextEncoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, HIDDEN)
        self.layers = nn.Sequential(nn.Linear(HIDDEN, HIDDEN), nn.GELU(), nn.Linear(HIDDEN, HIDDEN))

    def forward(self, tokens):
        return self.layers(self.embed(tokens))


class Denoiser(nn.Module):
    def __init__(self):
        super().__init__()
        self.cond = nn.Linear(HIDDEN, LATENT_CHANNELS)
        self.net = nn.Sequential(
            nn.Conv2d(LATENT_CHANNELS, 32, 3, padding=1),
            nn.SiLU(),
            nn.Conv2d(32, LATENT_CHANNELS, 3, padding=1),
        )

    def forward(self, latents, timestep, text):
        bias = self.cond(text.mean(dim=1))[:, :, None, None] * (timestep / 1000.0)
        return self.net(latents + bias)


class Decoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(
            nn.ConvTranspose2d(LATENT_CHANNELS, 16, 2, stride=2),
            nn.SiLU(),
            nn.ConvTranspose2d(16, 3, 2, stride=2),
        )

    def forward(self, latents):
        return self.net(latents).clamp(-1, 1)


class TinyPipeline:
    @pm.profile_model_parameters(lambda args, kwargs, result: args[0], name="tiny pipeline")  # args[0]: self
    def __init__(self):
        torch.manual_seed(0)
        self.text_encoder, self.denoiser, self.decoder = TextEncoder(), Denoiser(), Decoder()

    def parameters(self):  # so profile_model_parameters can count all three modules
        for module in (self.text_encoder, self.denoiser, self.decoder):
            yield from module.parameters()

    @pm.profile_method("text_encoding")
    def encode(self, prompt: str):
        tokens = torch.tensor([[hash(word) % VOCAB for word in prompt.split()] or [0]])
        return self.text_encoder(tokens)

    @pm.profile_diffusion_step(
        lambda args, kwargs, result: {"step_index": args[3], "timestep": float(args[2]), "block_size": FRAMES}
    )
    def denoise_step(self, latents, timestep, index, text):
        noise_prediction = self.denoiser(latents, timestep, text)
        return latents - 0.1 * noise_prediction

    @pm.profile_block_computation(
        lambda args, kwargs, result: {"block_index": args[2], "n_frames": int(result.shape[0])}
    )
    def decode_block(self, latents, block_index):
        return self.decoder(latents)

    @pm.profile_method("vae_decode")
    def decode(self, latents):
        blocks = [
            self.decode_block(latents[i : i + FRAMES_PER_BLOCK], i // FRAMES_PER_BLOCK)
            for i in range(0, FRAMES, FRAMES_PER_BLOCK)
        ]
        return torch.cat(blocks)

    @torch.inference_mode()
    def __call__(self, prompt: str, steps: int = 8, seed: int = 0):
        text = self.encode(prompt)
        generator = torch.Generator().manual_seed(seed)
        latents = torch.randn(FRAMES, LATENT_CHANNELS, LATENT_SIZE, LATENT_SIZE, generator=generator)
        with pm.profile_method("denoise"):
            for index, timestep in enumerate(torch.linspace(999, 0, steps)):
                latents = self.denoise_step(latents, timestep, index, text)
        pm.record_event("latents", lambda: {"shape": list(latents.shape), "std": float(latents.std())})
        return self.decode(latents)


def run(argv=None) -> list:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    # --enable_profiling / --profiling_config PATH, as Inferix's pipelines take them; on by default
    # here, since profiling is what this example shows. The file may be in Inferix's format.
    add_profiling_arguments(parser, enabled_by_default=True)
    parser.add_argument("--config", dest="profiling_config", help=argparse.SUPPRESS)  # the older name
    parser.add_argument("--preset", default="development", help="development or production")
    parser.add_argument("--output-dir", help="where reports go (default: the config's report.output_dir)")
    parser.add_argument("--generations", type=int, default=1)
    parser.add_argument("--steps", type=int, default=8)
    args = parser.parse_args(argv)
    overrides = {"report": {"output_dir": args.output_dir}} if args.output_dir else {}
    configure_from_args(args, preset=args.preset, **overrides)
    pipeline = TinyPipeline()
    sessions = []
    for i in range(args.generations):
        with pm.profile_session("tiny-t2v", tags={"generation": i, "steps": args.steps}) as session:
            frames = pipeline("a red fox running through snow", steps=args.steps, seed=i)
        log.info("generation %d: %s frames of %sx%s", i, frames.shape[0], frames.shape[-2], frames.shape[-1])
        if session is not None:
            for kind, path in session.paths.items():
                log.info("  %s report: %s", kind, path)
        sessions.append(session)
    pm.log_usage_summary()
    return sessions


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    run()
