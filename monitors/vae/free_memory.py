"""Free memory of a device as this process can use it, and which figure it came from.

What an encode on a GPU can get is the smaller of two limits:
- the device side, as ComfyUI's memory manager counts it: its free memory (the driver's free plus
  torch's cached blocks; on ComfyUI 0.33 `ModelPatcher.get_free_memory`, which adds the dynamic
  VRAM headroom aimdo can give back), plus what ComfyUI would unload from other models on that
  device, less the VRAM ComfyUI keeps in reserve (`--reserve-vram`);
- the process side: torch's per-process memory fraction (`set_per_process_memory_fraction`) caps
  what its allocator may hold, so this process can get at most the cap less what it has allocated
  (plus what unloading other models frees). The driver's free memory and ComfyUI ignore this cap.
`manager` says which ComfyUI memory manager the device side read: `dynamic` (dynamic VRAM, a
`ModelPatcherDynamic`) or `estimate-based` (ComfyUI's classic loader); None when no ComfyUI figure
was read (the plain torch/psutil reading of outcomes.read_free_memory).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..report import format_bytes

DYNAMIC, ESTIMATE_BASED = "dynamic", "estimate-based"


@dataclass(frozen=True)
class FreeMemory:
    free_bytes: int | None
    manager: str | None = None  # dynamic | estimate-based | None (not ComfyUI's memory manager)
    source: str | None = None  # how the figure was made, in words
    process_limit_bytes: int | None = None  # the per-process cap; None: no cap known
    capped_by_process_limit: bool = False  # the cap, not the device, decided the figure


def as_free_memory(value) -> FreeMemory:
    """A free-memory reader may return bytes (int) or a FreeMemory; None stays unknown."""
    if isinstance(value, FreeMemory):
        return value
    return FreeMemory(None if value is None else int(value))


def usable_gpu_free(
    manager_free_bytes: int,
    manager: str | None,
    reclaimable_bytes: int = 0,
    reserve_bytes: int = 0,
    process_limit: dict | None = None,
    allocated_bytes: int | None = None,
    manager_source: str = "ComfyUI's get_free_memory",
) -> FreeMemory:
    """The smaller of the device side and the process side (see the module's docstring)."""
    device_side = max(0, int(manager_free_bytes) + int(reclaimable_bytes) - int(reserve_bytes))
    source = (
        f"{manager_source} ({manager or 'no'} memory manager) {format_bytes(manager_free_bytes)}"
        f" + {format_bytes(reclaimable_bytes)} other models ComfyUI would unload"
        f" - {format_bytes(reserve_bytes)} ComfyUI reserve"
    )
    limit = None if process_limit is None else process_limit.get("limit_bytes")
    fraction = None if process_limit is None else process_limit.get("fraction")
    if limit is None or allocated_bytes is None or fraction is None or fraction >= 1.0:
        why = "no per-process memory fraction set" if fraction is not None and fraction >= 1.0 else None
        why = why or "per-process memory fraction unknown"
        return FreeMemory(device_side, manager, f"{source}; {why}")
    process_side = max(0, int(limit) - int(allocated_bytes) + int(reclaimable_bytes))
    capped = process_side < device_side
    source += (
        f"; per-process memory fraction {fraction:.3g} caps this process at {format_bytes(limit)}, "
        f"{format_bytes(allocated_bytes)} allocated: {format_bytes(process_side)} left"
        + (" (the cap decides)" if capped else "")
    )
    return FreeMemory(min(device_side, process_side), manager, source, int(limit), capped)
