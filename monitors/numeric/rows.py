"""Row lengths of the partial sums behind value_stats and compare_pair, and the bound they keep.

A leaf module (no imports from this package): tensor_stats, fused_kernels and dumps/compare all
read these, so none of them needs another just for a constant.

SUM_CHAIN_BOUND (M): no element passes through more than M rounded additions in torch's reduction
of a chunk or a row; the error bounds of tensor_stats' and dumps/compare's docstrings are in M.

ROW_ELEMENTS: rows of the float32 sums of squares on the CPU (and of the fused CPU kernels): a CPU
norm kernel adds a row sequentially, so a row of at most M/2 elements, plus the square's and the
square root's rounding, stays within M.

DEVICE_ROW_ELEMENTS: rows of the whole-tensor path a GPU takes (tensor_stats._device_reductions).
There a row is not added sequentially: torch's CUDA reduction (Reduce.cuh) gives each thread fewer
than 256 values of a row (a longer run is split across the warps of a block, then across blocks),
four accumulators per thread, then combines threads by a tree of <= 10 levels; a 16 Ki-element row
(32 values a thread) puts an element through at most 8 + 2 + 10 additions, within M. Long rows let
the row reduction stream at memory speed (128-element rows ran at 1.9-2.3x one whole-tensor pass
on an H200, issue 35); the row results (1/16 Ki of the tensor) are summed in float64.
"""

from __future__ import annotations

SUM_CHAIN_BOUND = 256
ROW_ELEMENTS = 128
DEVICE_ROW_ELEMENTS = 1 << 14
