"""The Inferix profiling guide's example (its "Using Profiling Decorators" section), as written
there but for the import line, and a 2-rank torch.distributed (gloo) job that runs it with the
guide's YAML file and flags. Used by test_inferix_compat.py."""

import argparse
import os
import time

import torch

# The guide's line: from inferix.profiling.decorators import profile_method, profile_session, ...
from monitors.pipeline_profiler.decorators import (
    add_profiling_event,
    profile_block_computation,
    profile_diffusion_step,
    profile_method,
    profile_model_parameters,
    profile_session,
)


# -- the guide's class, unchanged -----------------------------------------------------------------
class CustomPipeline:
    @profile_method("model_initialization")
    def _initialize_model(self):
        # Model initialization code
        pass

    @profile_session("video_generation", {"mode": "t2v"})
    @add_profiling_event("generation_completed", lambda result, **kwargs: {
        "output_shape": list(result.shape) if result is not None else None
    })
    def run_text_to_video(self, prompts, **kwargs):
        # Video generation code
        result = self._generate_video(prompts, **kwargs)
        return result

    @profile_method("checkpoint_loading")
    @add_profiling_event("checkpoint_loaded", lambda _, checkpoint_path, **kwargs: {
        "checkpoint_path": checkpoint_path
    })
    def load_checkpoint(self, checkpoint_path, **kwargs):
        # Checkpoint loading code
        pass

    @profile_diffusion_step(lambda args, kwargs: {
        "step": args[0],
        "timestep": args[1],
        "block_size": args[2]
    })
    def diffusion_step(self, step, timestep, block_size):
        # Diffusion step implementation
        pass

    @profile_model_parameters(lambda args, kwargs: {
        "model_name": args[0],
        "parameters_count": args[1],
        "model_type": args[2]
    })
    def record_model_parameters(self, model_name, parameters_count, model_type):
        # Record model parameters
        pass

    @profile_block_computation(lambda args, kwargs: {
        "block_index": args[0],
        "block_size": args[1],
        "computation_time_ms": args[2],
        "memory_usage_mb": args[3]
    })
    def process_block(self, block_index, block_size, computation_time_ms, memory_usage_mb):
        # Block processing implementation
        pass
# -- end of the guide's class ---------------------------------------------------------------------


N_STEPS, N_BLOCKS, BLOCK_SIZE = 4, 3, 2


class TinyPipeline(CustomPipeline):
    """The guide leaves `_generate_video` to the pipeline: here every decorated method runs once
    or more inside the session, as a real pipeline's generation would call them."""

    def _generate_video(self, prompts, **kwargs):
        self._initialize_model()
        self.load_checkpoint(kwargs.get("checkpoint_path", "weights/self_forcing_dmd.pt"))
        self.record_model_parameters("tiny_dit", 1234, "diffusion")
        latents = torch.zeros(N_BLOCKS * BLOCK_SIZE, 4, 8, 8)
        for step, timestep in enumerate((1000, 750, 500, 250)[:N_STEPS]):
            self.diffusion_step(step, timestep, BLOCK_SIZE)
        for block in range(N_BLOCKS):
            self.process_block(block, BLOCK_SIZE, 1.5 * (block + 1), 10.0 * (block + 1))
        wait_for_a_sample()
        return latents


def wait_for_a_sample(limit_s: float = 10.0) -> None:
    """A real generation lasts long enough for the sampler's timeline; this tiny one waits for
    its first tick (cpu_monitor_interval) so that the report's timeline is not empty."""
    from monitors.pipeline_profiler import current_session

    session = current_session()
    deadline = time.monotonic() + limit_s
    while session is not None and len(session.samples["t_s"]) == 0 and time.monotonic() < deadline:
        time.sleep(0.02)


def run_pipeline(argv: list[str]) -> torch.Tensor:
    """A pipeline's entry as Inferix's run scripts have it: its own flags plus the profiling ones."""
    from monitors.pipeline_profiler.inferix import add_profiling_arguments, configure_from_args

    parser = argparse.ArgumentParser()
    parser.add_argument("--prompt", required=True)
    add_profiling_arguments(parser)
    args = parser.parse_args(argv)
    configure_from_args(args)
    return TinyPipeline().run_text_to_video([args.prompt], checkpoint_path="weights/ckpt.pt")


def rank_worker(rank: int, world_size: int, init_file: str, config_path: str) -> None:
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world_size)
    try:
        dist.barrier()
        run_pipeline(["--prompt", f"a lighthouse, rank {rank}", "--enable_profiling", "--profiling_config", config_path])
        dist.barrier()
    finally:
        dist.destroy_process_group()
    os.environ.pop("RANK", None)
