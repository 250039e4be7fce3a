"""A tensor that records every matrix product made from it (its shape and dtype): a fake of the
backend that shows which path a norm took and what it cost, without patching the norm's helpers."""

from __future__ import annotations

import torch

MATMULS = (torch.Tensor.__matmul__, torch.matmul, torch.Tensor.matmul)


class Recorded(torch.Tensor):
    products: list = []  # (shape, dtype) of each product, in order; reset with `record`

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        out = super().__torch_function__(func, types, args, kwargs or {})
        if func in MATMULS:
            cls.products.append((tuple(out.shape), out.dtype))
        return out


def record(*tensors):
    """The tensors as Recorded ones, the record emptied."""
    Recorded.products = []
    return [t.as_subclass(Recorded) for t in tensors]


def shapes() -> list[tuple]:
    return [shape for shape, _ in Recorded.products]


def float64_products() -> list[tuple]:
    return [shape for shape, dtype in Recorded.products if dtype == torch.float64]
