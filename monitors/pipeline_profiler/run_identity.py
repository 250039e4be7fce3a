"""Which run a profiled session is: its rank and world size in a torchrun or torch.distributed job,
and its run id (name, UTC time, pid, rank).
"""

from __future__ import annotations

import os
import re
import sys
import time


def distributed_info() -> dict:
    """rank / world size / local rank of a torchrun or torch.distributed job; None outside one."""
    info = {"rank": None, "world_size": None, "local_rank": None}
    reasons = []
    for key, env in (("rank", "RANK"), ("world_size", "WORLD_SIZE"), ("local_rank", "LOCAL_RANK")):
        try:
            info[key] = int(os.environ[env])
        except KeyError:
            pass  # not a torchrun job: None is the answer, not an unknown
        except ValueError:
            reasons.append(f"{env}={os.environ[env]!r} is not an integer")
    dist = getattr(sys.modules.get("torch"), "distributed", None)
    try:
        if info["rank"] is None and dist is not None and dist.is_available() and dist.is_initialized():
            info["rank"], info["world_size"] = dist.get_rank(), dist.get_world_size()
    except Exception as exc:  # a half-initialised process group: rank stays unknown, with why
        reasons.append(f"torch.distributed: {type(exc).__name__}: {exc}")
    info["rank_unknown_reason"] = "; ".join(reasons) or None
    return info


def make_run_id(name: str, rank: int | None) -> str:
    """A file-name-safe id (the store's pattern): name, UTC time, pid, rank."""
    safe = re.sub(r"[^A-Za-z0-9_-]+", "-", name).strip("-")[:60] or "session"
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    run_id = f"{safe}-{stamp}-{os.getpid()}-{int(time.monotonic_ns() % 1_000_000):06d}"
    return run_id + (f"-rank{rank}" if rank is not None else "")
