"""Host copies of a dump's tensors, taken before the dump node returns, so that a downstream node
that changes a tensor in place cannot change the dump.

- CUDA tensors: pinned host memory and a non-blocking copy on the current stream, then one event
  per device recorded after the copies (monitors/probes/device_copy.py); the writer thread waits
  on the events, never the prompt's thread. Nothing is read back here.
- CPU tensors: a plain copy (a memcpy; a reference would not be safe against in-place changes).
- Other devices: a blocking copy to the CPU, as before.
Every copy is contiguous and owns its storage (safetensors refuses tensors sharing storage).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass
class HostCopies:
    tensors: dict[str, Any]  # name -> host tensor; its values are there once wait() returns
    events: list = field(default_factory=list)  # one per CUDA device copied from
    pinned_bytes: int = 0
    backend: Any = None

    def wait(self) -> None:
        """Block until every copy is complete (the writer thread)."""
        for event in self.events:
            self.backend.wait(event)


def take_host_copies(tensors: Mapping[str, Any], backend) -> HostCopies:
    """Enqueue (CUDA) or make (CPU) a host copy of each tensor; returns at once on a GPU."""
    import torch

    copies: dict[str, Any] = {}
    devices: list = []
    pinned = 0
    for name, tensor in tensors.items():
        t = tensor.detach()
        if backend.handles(t):
            copies[name] = backend.pinned_copy(t)
            pinned += int(t.numel()) * int(t.element_size())
            if t.device not in devices:
                devices.append(t.device)
        elif t.device.type == "cpu":
            copies[name] = t.clone(memory_format=torch.contiguous_format)
        else:
            copies[name] = t.to("cpu").contiguous()
    events = [backend.record_event(device) for device in devices]
    return HostCopies(copies, events, pinned, backend)
