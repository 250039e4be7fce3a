"""Torch CUDA caching-allocator readings. Never initialises CUDA just to read.

Methods may raise; the Probes facade turns any failure into None.
"""

from __future__ import annotations

import sys

# Key of a memory() reading that holds {counter: why it is None}; never a GpuReading field.
UNKNOWN_REASONS_KEY = "unknown_reasons"


class TorchAllocatorBackend:
    """Real backend over torch.cuda, used only once the process itself has initialised CUDA."""

    name = "torch.cuda"

    def _cuda(self):
        torch = sys.modules.get("torch")  # never import torch (or CUDA) just to read
        if torch is None:
            return None
        cuda = torch.cuda
        # is_initialized() first: it is a flag read, while is_available() costs ~1 us a call and
        # every profiled node asks several times.
        if not cuda.is_initialized() or not cuda.is_available():
            return None
        return cuda

    def device_count(self) -> int:
        cuda = self._cuda()
        return 0 if cuda is None else int(cuda.device_count())

    def allocator_backend(self) -> str | None:
        cuda = self._cuda()
        if cuda is None:
            return None
        return str(cuda.get_allocator_backend())

    def device_name(self, index: int) -> str | None:
        cuda = self._cuda()
        return None if cuda is None else str(cuda.get_device_name(index))

    def memory(self, index: int) -> dict:
        """Current and peak allocated/reserved bytes. Under cudaMallocAsync the peaks may be missing."""
        cuda = self._cuda()
        if cuda is None:
            raise RuntimeError("CUDA not initialised")
        stats = cuda.memory_stats(index)
        reasons: dict[str, str] = {}
        values = {
            "allocated_bytes": _stat(
                stats, "allocated_bytes.all.current", cuda.memory_allocated, index, reasons
            ),
            "reserved_bytes": _stat(
                stats, "reserved_bytes.all.current", cuda.memory_reserved, index, reasons
            ),
            "peak_allocated_bytes": _stat(
                stats, "allocated_bytes.all.peak", cuda.max_memory_allocated, index, reasons
            ),
            "peak_reserved_bytes": _stat(
                stats, "reserved_bytes.all.peak", cuda.max_memory_reserved, index, reasons
            ),
        }
        if reasons:
            values[UNKNOWN_REASONS_KEY] = reasons  # the Probes facade moves these to its failures
        return values

    def process_limit(self, index: int) -> dict:
        """This process's allocator cap on device `index`: `set_per_process_memory_fraction`'s
        fraction of the device's total (the caching allocator refuses to reserve beyond it, while
        `mem_get_info` and ComfyUI's free memory ignore it). Raises where torch has no getter."""
        cuda = self._cuda()
        if cuda is None:
            raise RuntimeError("CUDA not initialised")
        getter = getattr(cuda, "get_per_process_memory_fraction", None)
        if getter is None:
            raise RuntimeError("this torch has no torch.cuda.get_per_process_memory_fraction")
        fraction = float(getter(index))
        total = int(cuda.get_device_properties(index).total_memory)
        return {"fraction": fraction, "total_bytes": total, "limit_bytes": int(total * fraction)}

    # -- GPU time: CUDA events on the current stream ---------------------------------------------
    def current_device(self) -> int | None:
        cuda = self._cuda()
        return None if cuda is None else int(cuda.current_device())

    def record_event(self, index: int):
        """A timing event recorded on device `index`'s current stream: it completes when the GPU
        reaches this point of the queue, not when the host passes it (no synchronize here)."""
        cuda = self._cuda()
        if cuda is None:
            return None
        event = cuda.Event(enable_timing=True)
        event.record(cuda.current_stream(index))
        return event

    def elapsed_s(self, start, end) -> float:
        """Seconds of GPU queue between two recorded events; waits for `end` to complete (called
        once per prompt, at its end, when the work is done or nearly so)."""
        end.synchronize()
        return float(start.elapsed_time(end)) / 1000.0

    def reset_peak(self, index: int) -> bool:
        cuda = self._cuda()
        if cuda is None:
            return False
        cuda.reset_peak_memory_stats(index)
        return True


def _stat(stats: dict, key: str, fallback, index: int, reasons: dict[str, str]) -> int | None:
    if key in stats:
        return int(stats[key])
    try:
        return int(fallback(index))
    except Exception as exc:  # one counter missing must not hide the others
        reasons[key] = f"not in memory_stats, {fallback.__name__}: {type(exc).__name__}: {exc}"
        return None
