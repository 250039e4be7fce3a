"""What one run of the VAE chain is given and gives back (chain.py runs it): the strategies and
outcomes, the options with their defaults (free memory, cleanup, calibration), an attempt, the
result, and what counts as running out of memory.
"""

from __future__ import annotations

import gc
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..engine.span import SpanResult
from ..probes import Probes
from ..report import Finding
from .calibration import PROCESS_TABLE, CalibrationTable
from .free_memory import FreeMemory, usable_gpu_free
from .geometry import Prediction
from .tiles import TileSettings

log = logging.getLogger(__name__)

STRATEGIES = ("direct", "tiled", "cpu", "dummy")
REQUESTS = ("auto", "direct", "tiled", "cpu")  # what the user can choose; auto starts at direct
OK, OOM, ERROR, SKIPPED = "ok", "oom", "error", "skipped"
# RuntimeError texts of allocators that ran out (CPU: "DefaultCPUAllocator: can't allocate memory",
# Windows: "not enough memory"; MPS/XPU/older CUDA builds: "... out of memory").
OOM_MESSAGE_MARKERS = ("can't allocate memory", "not enough memory", "out of memory")
MAX_ERROR_MESSAGE_CHARS = 1000


def is_out_of_memory(exc: BaseException) -> bool:
    """CUDA's OutOfMemoryError, Python's MemoryError, or a RuntimeError from an allocator that ran out."""
    import torch

    oom_types = tuple(
        t
        for t in (getattr(torch, "OutOfMemoryError", None), getattr(torch.cuda, "OutOfMemoryError", None))
        if isinstance(t, type)
    )
    if isinstance(exc, (MemoryError, *oom_types)):
        return True
    return isinstance(exc, RuntimeError) and any(m in str(exc).lower() for m in OOM_MESSAGE_MARKERS)


def read_free_memory(device, probes: Probes | None = None) -> int | FreeMemory | None:
    """Free bytes of a device as the process can use them: available RAM, or CUDA free + cached
    under this process's memory fraction (free_memory.py). None for other devices; a failed read
    raises, so that the chain records why."""
    name = str(device)
    if name.startswith("cuda"):
        import torch

        from ..probes import get_probes

        probes = probes or get_probes()
        index = int(name.split(":")[1]) if ":" in name else torch.cuda.current_device()
        free, _total = torch.cuda.mem_get_info(index)
        allocated = torch.cuda.memory_allocated(index)
        cached = torch.cuda.memory_reserved(index) - allocated
        return usable_gpu_free(
            int(free + max(0, cached)),
            None,
            process_limit=probes.gpu_process_limit(index),
            allocated_bytes=allocated,
            manager_source="torch.cuda.mem_get_info + cached",
        )
    if name.startswith("cpu"):
        import psutil

        return int(psutil.virtual_memory().available)
    return None


def release_memory() -> None:
    """Default cleanup between attempts: collect garbage and return cached CUDA blocks."""
    gc.collect()
    try:
        import torch

        if torch.cuda.is_available() and torch.cuda.is_initialized():
            torch.cuda.empty_cache()
    except Exception as exc:
        log.debug("pipeline monitor: empty_cache failed: %s", exc)


@dataclass(frozen=True)
class Attempt:
    strategy: str
    outcome: str  # ok | oom | error | skipped
    reason: str | None = None
    error_type: str | None = None
    error_message: str | None = None
    duration_s: float | None = None
    peaks: dict = field(default_factory=dict)  # metric -> {"value", "at_s"}: RSS, GPU allocated/reserved
    prediction: Prediction | None = None
    prediction_held: bool | None = None
    cleanup_reclaimed_bytes: int | None = None
    notes: tuple[str, ...] = ()  # log lines seen during the attempt that matter (watch_log_messages)
    memory_snapshot: dict | None = None  # what was loaded when it ran out of memory (options.memory_snapshot)
    caught_by_comfyui: bool = False  # ComfyUI's encode caught this out-of-memory and retried tiled itself
    # How a CPU encode got its weights (CpuEncoded): None for the GPU strategies.
    compute_dtype: str | None = None  # the dtype the CPU encode ran in (input and weights agree)
    weights_reload_s: float | None = None  # reloading the weights from the VAE's file (dynamic VRAM)
    weights_detached: bool | None = None  # a dynamic-VRAM VAE was taken off its GPU for this encode

    def to_dict(self) -> dict:
        data = dict(self.__dict__)
        data["prediction"] = None if self.prediction is None else self.prediction.to_dict()
        data["notes"] = list(self.notes)
        return data


@dataclass(frozen=True)
class CpuEncoded:
    """What a `cpu_encode` may return instead of the bare latent: how the CPU copy of the VAE was
    made, for the attempt's row. `weights_reload_s` is None when the encode used the loaded weights
    (no reload from the file); `weights_detached` is true when the VAE was under dynamic VRAM and
    loaded on its GPU, so that its next GPU encode loads the weights again."""

    samples: Any
    compute_dtype: str | None = None
    weights_reload_s: float | None = None
    weights_detached: bool = False


@dataclass
class ChainOptions:
    strategy: str = "auto"
    allow_dummy: bool = False
    # None: ComfyUI's own retry tiling for the VAE's dimensionality (comfy_retry_tiles)
    tiles: TileSettings | None = field(default_factory=TileSettings)
    # device name -> free bytes, or a free_memory.FreeMemory saying how they were counted
    free_memory: Callable[[str], int | FreeMemory | None] = read_free_memory
    cleanup: Callable[[], None] = release_memory
    # (vae, pixels) -> latent or CpuEncoded, run on the CPU
    cpu_encode: Callable[[Any, Any], Any] | None = None
    watch_log_messages: tuple[str, ...] = ()  # e.g. ComfyUI's "retrying with tiled" warning
    # VAE methods its own encode calls to retry tiled after an out-of-memory (comfy_retry.py); a call
    # during direct counts that attempt as out of memory even where the log hides the warning
    retry_tilers: tuple[str, ...] = ()
    probes: Probes | None = None
    memory_snapshot: Callable[[], dict] | None = None  # plain data on what is loaded, read at an OOM
    # Measured/estimated ratios of earlier attempts (per process by default); None: the raw estimate.
    calibration: CalibrationTable | None = field(default_factory=lambda: PROCESS_TABLE)


@dataclass
class ChainResult:
    requested: str
    tiles: TileSettings = field(default_factory=TileSettings)  # as used (overlap may be reduced)
    samples: Any = None  # the latent; the caller passes it on, reports never keep it
    strategy_used: str | None = None
    attempts: list[Attempt] = field(default_factory=list)
    predictions: dict[str, Prediction] = field(default_factory=dict)
    input_findings: tuple[Finding, ...] = ()
    pixels_info: dict | None = None
    device: str | None = None
    free_before_bytes: int | None = None
    free_after_bytes: int | None = None
    free_memory_manager: str | None = None  # ComfyUI's memory manager the free figures read (free_memory.py)
    span: SpanResult | None = None
    error: str | None = None
    error_kind: str | None = None  # bad_input | out_of_memory | error
    exception: BaseException | None = None  # only a non-OOM error that stopped the chain
    monitor_errors: list[str] = field(default_factory=list)

    def attempt(self, strategy: str) -> Attempt | None:
        """The first attempt of that strategy, None when the chain did not try it."""
        return next((attempt for attempt in self.attempts if attempt.strategy == strategy), None)

    @property
    def cleanup_reclaimed_bytes(self) -> int | None:
        values = [a.cleanup_reclaimed_bytes for a in self.attempts if a.cleanup_reclaimed_bytes is not None]
        return sum(values) if values else None


def strategy_plan(requested: str) -> tuple[str, ...]:
    start = "direct" if requested == "auto" else requested
    if start not in STRATEGIES[:-1]:
        raise ValueError(f"unknown strategy {requested!r}: choose one of {', '.join(REQUESTS)}")
    return STRATEGIES[STRATEGIES.index(start) :]
