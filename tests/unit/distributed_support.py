"""A 2-rank CPU job (gloo) for the aggregate test: each rank profiles a tiny pipeline and writes its
report. Rank 1 is slower in its denoising steps (so rank 0 waits in the all-reduce) and in its
decode after the all-reduce (so rank 1 is the slowest rank as a whole).

Durations are exact, not real sleeps: each rank's monitors read a fake clock (tests/unit/fake_clock.py)
that starts at the same value on both ranks after a barrier; "work" advances it, and leaving the
all-reduce moves it to the latest clock among the ranks, as a real collective makes the early rank
wait for the late one. So rank 0 waits 0.15 s there, whatever the machine's load."""

import os
import time


def rank_worker(rank: int, world_size: int, init_file: str, out_dir: str) -> None:
    import torch
    import torch.distributed as dist

    from monitors import pipeline_profiler as pm
    from tests.unit.fake_clock import FakeClock, install

    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world_size)
    try:
        pm.configure(
            report={"output_dir": out_dir, "format": "json", "trace": True},
            sampling={"gpu_interval_s": 0.02, "cpu_interval_s": 0.02},
        )
        started_unix = torch.tensor([time.time()], dtype=torch.float64)
        dist.all_reduce(started_unix, op=dist.ReduceOp.MAX)
        # A microsecond per read, so that no stage lasts exactly zero seconds.
        clock = install(FakeClock(unix_start_s=float(started_unix), tick_s=1e-6))

        def leave_collective():
            latest = torch.tensor([clock.monotonic()], dtype=torch.float64)
            dist.all_reduce(latest, op=dist.ReduceOp.MAX)
            clock.move_to(float(latest))

        @pm.profile_method("text_encoding")
        def encode():
            return torch.randn(1, 8, 16)

        @pm.profile_diffusion_step(lambda args, kwargs, result: {"step_index": args[1]})
        def step(x, i):
            clock.advance(0.06 if rank == 1 else 0.01)
            return x * 0.9

        @pm.profile_method("all_reduce")
        def sync(x):
            dist.all_reduce(x)
            leave_collective()
            return x

        @pm.profile_method("vae_decode")
        def decode(x):
            clock.advance(0.2 if rank == 1 else 0.01)
            return x.sum()

        dist.barrier()  # both ranks start their session together
        with pm.profile_session("job", tags={"world": world_size}):
            x = encode()
            with pm.profile_method("denoise"):
                for i in range(3):
                    x = step(x, i)
            decode(sync(x))
        dist.barrier()
    finally:
        dist.destroy_process_group()
    os.environ.pop("RANK", None)
