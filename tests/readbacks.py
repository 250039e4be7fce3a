"""A CPU proxy for the GPU rule "one host read-back per step": count what would wait for a device.

On a GPU every `.item()`, `.tolist()`, `float(t)`, `bool(t)`... copies a value to the host and
waits for every kernel queued before it. These machines have no GPU, so tests run the code on CPU
tensors under `ReadbackCounter`, a torch function mode that counts those calls (whatever device
the tensor is on) and records which tensors any torch function touched, so a test can also say
"this step never read that weight" (metadata such as `.shape` or `.data_ptr()` is not a read).
"""

from __future__ import annotations

from collections import Counter

from torch.overrides import TorchFunctionMode

# Calls that bring a tensor's values to the host (a device synchronisation on CUDA).
READBACK_NAMES = frozenset(
    (
        "item",
        "tolist",
        "__float__",
        "__int__",
        "__bool__",
        "__index__",
        "__complex__",
        "numpy",
        "cpu",
        "__format__",
    )
)
# Calls that read metadata only: never a read of the tensor's values.
METADATA_NAMES = frozenset(
    (
        "__get__",
        "detach",  # a view: no value read
        "__hash__",
        "data_ptr",
        "dim",
        "size",
        "numel",
        "element_size",
        "is_contiguous",
        "untyped_storage",
        "storage_offset",
        "stride",
        "__len__",
        "__repr__",
    )
)


def _tensors_in(values, out: list) -> None:
    import torch

    for value in values:
        if isinstance(value, torch.Tensor):
            out.append(value)
        elif isinstance(value, (list, tuple)):
            _tensors_in(value, out)
        elif isinstance(value, dict):
            _tensors_in(value.values(), out)


class ReadbackCounter(TorchFunctionMode):
    """`with ReadbackCounter() as counter:` ... then `counter.n_readbacks`, `counter.by_name`,
    `counter.touched(tensor)` (a torch function other than metadata took it as an argument)."""

    def __init__(self) -> None:
        super().__init__()
        self.by_name: Counter[str] = Counter()
        self._storages: set[int] = set()  # storages touched: a detached view or slice is its weight

    @property
    def n_readbacks(self) -> int:
        return sum(self.by_name.values())

    def touched(self, tensor) -> bool:
        """Whether a torch function other than metadata took this tensor, or a view of its storage."""
        return _storage(tensor) in self._storages

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        if name in READBACK_NAMES:
            self.by_name[name] += 1
        if name not in METADATA_NAMES:
            found: list = []
            _tensors_in(args, found)
            _tensors_in(kwargs.values(), found)
            self._storages.update(_storage(tensor) for tensor in found)
        return func(*args, **kwargs)


def _storage(tensor) -> int | None:
    try:
        pointer = tensor.untyped_storage().data_ptr()
    except Exception:  # meta, sparse or wrapper tensors: no storage to name
        return None
    return pointer or None
