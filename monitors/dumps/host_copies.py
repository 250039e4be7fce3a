"""Host copies of a dump's tensors, taken before the dump node returns, so that a downstream node
that changes a tensor in place cannot change the dump.

- CUDA tensors: pinned host memory and a non-blocking copy on the current stream, then one event
  per device recorded after the copies (monitors/probes/device_copy.py); the writer thread waits
  on the events, never the prompt's thread. Nothing is read back here.
- CPU tensors: a plain copy (a memcpy; a reference would not be safe against in-place changes),
  into host memory reused from earlier dumps while the writer is busy (HostBuffers): fresh memory
  costs a page fault per page, and a 128 MiB copy took 120-160 ms into new memory, 20-26 ms into
  reused memory, on this project's 2-core CPU.
- Other devices: a blocking copy to the CPU, as before.
Every copy is contiguous and owns its storage (safetensors refuses tensors sharing storage).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


class HostBuffers:
    """Byte buffers for CPU copies, handed back after each write and reused by the next dump; at
    most `max_bytes` kept, all dropped by clear() (the writer, once idle)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._free: list = []  # uint8 tensors

    def copy_of(self, tensor) -> tuple[Any, Any]:
        """(a contiguous copy of the CPU tensor `tensor` inside a buffer, that buffer)."""
        import torch

        nbytes = int(tensor.numel()) * int(tensor.element_size())
        with self._lock:
            fits = [i for i, b in enumerate(self._free) if int(b.numel()) >= nbytes]
            # by index: list.remove would compare tensors with ==, element by element
            index = min(fits, key=lambda i: int(self._free[i].numel())) if fits else None
            buffer = self._free.pop(index) if index is not None else None
        if buffer is None:
            buffer = torch.empty(nbytes, dtype=torch.uint8)
        copy = buffer[:nbytes].view(tensor.dtype).view(tuple(tensor.shape))
        copy.copy_(tensor)
        return copy, buffer

    def give_back(self, buffers: list, max_bytes: int) -> None:
        """Keep `buffers` for later copies, the largest first, up to `max_bytes` in all."""
        with self._lock:
            kept = sorted(self._free + list(buffers), key=lambda b: -int(b.numel()))
            self._free, total = [], 0
            for buffer in kept:
                if total + int(buffer.numel()) <= max_bytes:
                    self._free.append(buffer)
                    total += int(buffer.numel())

    def clear(self) -> None:
        with self._lock:
            self._free = []

    @property
    def kept_bytes(self) -> int:
        with self._lock:
            return sum(int(b.numel()) for b in self._free)


@dataclass
class HostCopies:
    tensors: dict[str, Any]  # name -> host tensor; its values are there once wait() returns
    events: list = field(default_factory=list)  # one per CUDA device copied from
    pinned_bytes: int = 0
    backend: Any = None
    buffers: list = field(default_factory=list)  # HostBuffers' buffers, to give back once written

    def wait(self) -> None:
        """Block until every copy is complete (the writer thread)."""
        for event in self.events:
            self.backend.wait(event)


def take_host_copies(tensors: Mapping[str, Any], backend, host_buffers: HostBuffers) -> HostCopies:
    """Enqueue (CUDA) or make (CPU) a host copy of each tensor; returns at once on a GPU."""
    copies: dict[str, Any] = {}
    devices: list = []
    buffers: list = []
    pinned = 0
    for name, tensor in tensors.items():
        t = tensor.detach()
        if backend.handles(t):
            copies[name] = backend.pinned_copy(t)
            pinned += int(t.numel()) * int(t.element_size())
            if t.device not in devices:
                devices.append(t.device)
        elif t.device.type == "cpu":
            copies[name], buffer = host_buffers.copy_of(t)
            buffers.append(buffer)
        else:
            copies[name] = t.to("cpu").contiguous()
    events = [backend.record_event(device) for device in devices]
    return HostCopies(copies, events, pinned, backend, buffers)
