"""Copies of device tensors to the host without a stall: pinned host memory, a non-blocking copy
on the current stream, an event recorded after it (torch.cuda). Never initialises CUDA: a tensor on
a CUDA device means the process already has; anything else is not this backend's.

Used by the tensor dump (monitors/dumps/host_copies.py); tests pass a fake with the same methods.
"""

from __future__ import annotations

import sys


class CudaCopyBackend:
    """Real backend over torch.cuda."""

    name = "torch.cuda"

    def _cuda(self):
        torch = sys.modules.get("torch")  # never import torch (or CUDA) just for this
        if torch is None or not torch.cuda.is_initialized():
            return None
        return torch.cuda

    def handles(self, tensor) -> bool:
        """Whether `tensor` lives on a CUDA device this backend can copy from asynchronously."""
        return tensor.device.type == "cuda" and self._cuda() is not None

    def pinned_copy(self, tensor):
        """A new pinned (page-locked) host tensor of `tensor`'s shape and dtype, with a copy from
        `tensor` enqueued on its device's current stream: its values are there once an event
        recorded after it completes, not when this returns."""
        import torch

        host = torch.empty(tuple(tensor.shape), dtype=tensor.dtype, pin_memory=True)
        with torch.cuda.device(tensor.device):
            host.copy_(tensor, non_blocking=True)
        return host

    def record_event(self, device):
        """An event on `device`'s current stream, after the copies enqueued so far."""
        cuda = self._cuda()
        event = cuda.Event()
        event.record(cuda.current_stream(device))
        return event

    def wait(self, event) -> None:
        """Block the calling thread (a writer thread, never the prompt's) until `event` completes."""
        event.synchronize()
