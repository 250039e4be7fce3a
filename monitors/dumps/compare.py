"""Compare two sets of named tensors (dumps or live values): per tensor shape/dtype match, max and
mean absolute difference, relative error, cosine similarity, allclose; and a one-line verdict.

`a` is the reference. allclose follows torch.allclose(b, a, rtol, atol): |b - a| <= atol + rtol*|a|,
with NaN equal to NaN and an Inf equal only to the same Inf. Tensors are fetched one pair at a time
and worked through in chunks on their own device (never copied to the CPU), so extra memory is
bounded whatever the tensor size.

Speed: when every value is finite (the common case) each chunk is reduced in one pass of torch
kernels in the pair's common float type (float32 for float32, float16 and bfloat16; float64 when
either side is float64, or for pairs of at most FLOAT64_MAX_ELEMENTS, where it costs nothing), and
the per-chunk results, the count outside tolerance included, are read back once per pair. The
tolerance test is torch.isclose's formula in that type, so n_not_close and allclose are exactly
torch.allclose's on the pair cast to it; equal is exact; max_abs_diff is |b - a| rounded once to
that type.

Error bound (float32 accumulation, u = 2**-24, M = tensor_stats.SUM_CHAIN_BOUND): sum |b - a| is
torch.sum's cascade sum per chunk, within M*u of the sum of magnitudes; the squared norms of a, b
and b - a are row norms (tensor_stats.row_sum_of_squares: rows of <= M/2 additions, then
the square root's rounding) squared and summed in float64, within (M+2)*u relative (they are sums
of non-negative terms). relative_error is within (M+2)*u relative. The dot product is polarized
from the three norms, a.b = (|a|**2 + |b|**2 - |b - a|**2) / 2, so the cosine is within
(M+2)*u*(P+1) of the exact one, P = polarization_factor (1 for b == a, 2 for orthogonal tensors of
equal norm, 3 for b == -a); where P > POLARIZATION_LIMIT (norms far apart) a second pass sums the
products a*b by the cascade sum instead, and the cosine is within (2M+2)*u. float64 accumulation
sums the products themselves. Across chunks everything is summed in float64. As before, float32
squares of values under about 1e-19 underflow, so norms of such tiny tensors are not reliable.
A chunk with NaN or Inf (its max |b - a| or a norm not finite, which an overflowing float32 sum
also gives) sends the pair to the float64 path that handles them, also on the tensors' device.
On a GPU the fast path takes fewer passes and rows of 16 Ki elements (compare_device.py): the same
figures within the same bounds.
compare_dumps / compare_dump_with open dumps (safetensors only, see dumps.py) and compare them.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping
from typing import Any

from ..numeric.fused_kernels import KERNELS
from ..numeric.tensor_stats import one_cpu_thread, row_sum_of_squares
from .compare_device import add_device_parts
from .compare_float64 import float64_totals
from .files import DumpReader, open_dump

CHUNK_ELEMENTS = 1 << 22  # the float64 path's chunk
FAST_CHUNK_ELEMENTS = (
    1 << 20
)  # the fast path's: four 4 MiB buffers, in the CPU's last-level cache; fewer kernel launches
# On a GPU: 16 Mi-element chunks (four 64 MiB buffers); 1 Mi chunks cost 12-14x the yardstick
# there in kernel launches (issue 25).
DEVICE_CHUNK_ELEMENTS = 1 << 24
FLOAT64_MAX_ELEMENTS = 1 << 16
POLARIZATION_LIMIT = 4.0  # above: the dot product is summed from the products in a second pass
STATUSES = ("identical", "close", "different", "incompatible", "nothing_to_compare")


def compare_pair(a, b, rtol: float, atol: float) -> dict[str, Any]:
    import torch

    row: dict[str, Any] = {
        "shape_a": [int(s) for s in a.shape],
        "shape_b": [int(s) for s in b.shape],
        "dtype_a": str(a.dtype).replace("torch.", ""),
        "dtype_b": str(b.dtype).replace("torch.", ""),
        "n_elements": int(a.numel()),
        "max_abs_diff": None,
        "mean_abs_diff": None,
        "relative_error": None,
        "cosine_similarity": None,
        "n_not_close": None,
        "n_nan_mismatch": None,
        "allclose": False,
        "equal": False,
        "reason": None,
    }
    row["shape_match"] = row["shape_a"] == row["shape_b"]
    row["dtype_match"] = row["dtype_a"] == row["dtype_b"]
    if not row["shape_match"]:
        same_count = int(a.numel()) == int(b.numel())
        row["reason"] = "shape mismatch" + (" (same number of elements: reshaped?)" if same_count else "")
        return row
    if a.is_complex() or b.is_complex():
        row["reason"] = "complex tensors are not compared"
        return row
    n = int(a.numel())
    if n == 0:
        row.update(allclose=True, equal=row["dtype_match"], n_not_close=0, n_nan_mismatch=0)
        return row

    flat_a, flat_b = a.detach().reshape(-1), b.detach().reshape(-1)
    if flat_b.device != flat_a.device:  # a dump (CPU) against a live GPU value: compare on the GPU
        flat_a = flat_a.to(flat_b.device)
    with torch.no_grad():
        totals = _fast_totals(flat_a, flat_b, rtol, atol)
        if totals is None:
            with one_cpu_thread(flat_a.device.type):
                totals = float64_totals(flat_a, flat_b, rtol, atol, CHUNK_ELEMENTS, DEVICE_CHUNK_ELEMENTS)
    max_diff, sum_diff, n_finite_diff = totals["max_diff"], totals["sum_diff"], totals["n_finite_diff"]
    dot, norm_a2, norm_b2, diff2 = totals["dot"], totals["norm_a2"], totals["norm_b2"], totals["diff2"]
    n_not_close, n_nan_mismatch = totals["n_not_close"], totals["n_nan_mismatch"]
    row["n_not_close"] = n_not_close
    row["n_nan_mismatch"] = n_nan_mismatch
    row["allclose"] = n_not_close == 0
    if n_finite_diff:
        row["max_abs_diff"] = max_diff
        row["mean_abs_diff"] = sum_diff / n_finite_diff
    if norm_a2 > 0:
        row["relative_error"] = math.sqrt(diff2) / math.sqrt(norm_a2)
    elif diff2 == 0:
        row["relative_error"] = 0.0
    if norm_a2 > 0 and norm_b2 > 0:
        row["cosine_similarity"] = max(-1.0, min(1.0, dot / math.sqrt(norm_a2 * norm_b2)))
    row["equal"] = row["dtype_match"] and n_nan_mismatch == 0 and n_finite_diff == n and max_diff == 0.0
    if not row["allclose"]:
        row["reason"] = f"{n_not_close} of {n} elements outside tolerance"
    return row


def _fast_totals(flat_a, flat_b, rtol: float, atol: float) -> dict | None:
    """One pass of kernels per chunk, results read back once per pair; None when a value is not
    finite (or an accumulation overflows), for the float64 path to handle.

    Per chunk: b - a into a reused buffer while both chunks are in cache; squared norms of a, b
    and b - a as row norms (tensor_stats.row_sum_of_squares, no product written) summed in
    float64; the tolerance atol + rtol*|a| (torch.isclose's formula and rounding) into a second
    buffer; then |b - a| in place for its max, sum and the count outside tolerance (0/1 floats,
    exact below 2**24 per chunk). The dot product comes from the norms by polarization,
    a.b = (|a|**2 + |b|**2 - |b - a|**2) / 2, whose error relative to |a||b| grows with
    (|a|**2 + |b|**2 + |b - a|**2) / (2|a||b|); above POLARIZATION_LIMIT (very unequal norms, or
    nearly opposite tensors) a second pass sums the products instead. On the CPU, once
    fused_kernels has compiled them, full chunks take one fused kernel each (same figures, the
    products summed instead of polarized)."""
    import torch

    n = int(flat_a.numel())
    wide = torch.float64 in (flat_a.dtype, flat_b.dtype) or n <= FLOAT64_MAX_ELEMENTS
    acc = torch.float64 if wide else torch.float32
    # Full chunks by the fused kernels once compiled (fused_kernels.py); the rest here.
    parts, fused_elements = ([], 0) if wide else KERNELS.compare_chunks(flat_a, flat_b, rtol, atol)
    sums_products = wide or fused_elements > 0  # else the dot product is polarized from the norms
    with one_cpu_thread(flat_a.device.type):
        if acc == torch.float32 and not fused_elements and _fast_chunk(flat_a) == DEVICE_CHUNK_ELEMENTS:  # GPU
            add_device_parts(parts, flat_a, flat_b, rtol, atol, DEVICE_CHUNK_ELEMENTS)
        else:
            _add_eager_parts(
                parts, flat_a[fused_elements:], flat_b[fused_elements:], acc, rtol, atol, sums_products
            )
        columns = torch.stack(parts).T.tolist()  # the one read-back of the common case
        max_s, sum_s, count_s, a2_s, b2_s, diff2_s = columns[:6]
        if not all(
            map(math.isfinite, max_s + sum_s + a2_s + b2_s + diff2_s + (columns[6] if sums_products else []))
        ):
            return None
        norm_a2, norm_b2, diff2 = math.fsum(a2_s), math.fsum(b2_s), math.fsum(diff2_s)
        dot = math.fsum(columns[6]) if sums_products else (norm_a2 + norm_b2 - diff2) / 2
        if (
            not sums_products
            and norm_a2 > 0
            and norm_b2 > 0
            and polarization_factor(norm_a2, norm_b2, diff2) > POLARIZATION_LIMIT
        ):
            dot = _summed_dot(flat_a, flat_b, acc)
    return {
        "max_diff": max(max_s),
        "sum_diff": math.fsum(sum_s),
        "n_finite_diff": n,
        "n_not_close": int(sum(count_s)),
        "n_nan_mismatch": 0,
        "dot": dot,
        "norm_a2": norm_a2,
        "norm_b2": norm_b2,
        "diff2": diff2,
    }


def _add_eager_parts(parts: list, flat_a, flat_b, acc, rtol: float, atol: float, sums_products: bool) -> None:
    """The per-chunk figures by eager kernels, appended to `parts` as float64 tensors."""
    import torch

    n = int(flat_a.numel())
    step = _fast_chunk(flat_a)
    size = min(n, step)
    a_buf, b_buf, diff_buf, work_buf = (torch.empty(size, dtype=acc, device=flat_a.device) for _ in range(4))
    for start in range(0, n, step):
        raw_a = flat_a[start : start + step]
        raw_b = flat_b[start : start + step]
        length = int(raw_a.numel())
        ca = raw_a if raw_a.dtype == acc else a_buf[:length].copy_(raw_a)  # exact: half to float32
        cb = raw_b if raw_b.dtype == acc else b_buf[:length].copy_(raw_b)
        diff, work = diff_buf[:length], work_buf[:length]
        torch.sub(cb, ca, out=diff)
        if acc == torch.float64:  # products summed by the cascade sum: small tensors are compared by eye
            squares = [torch.mul(x, y, out=work).sum() for x, y in ((ca, ca), (cb, cb), (diff, diff))]
        else:
            squares = [row_sum_of_squares(ca), row_sum_of_squares(cb), row_sum_of_squares(diff)]
        if sums_products:
            squares.append(torch.mul(ca, cb, out=work).sum())
        torch.abs(ca, out=work).mul_(rtol).add_(atol)  # torch.isclose's allowed error
        diff.abs_()
        n_not_close = torch.gt(diff, work, out=work).sum()
        figures = [diff.amax(), diff.sum(), n_not_close]
        parts.append(
            torch.cat([torch.stack(figures).to(torch.float64), torch.stack(squares).to(torch.float64)])
        )


def _summed_dot(flat_a, flat_b, acc) -> float:
    """a.b summed from the products (chunks by torch.sum's cascade sum, then float64)."""
    import torch

    size = min(int(flat_a.numel()), _fast_chunk(flat_a))
    a_buf, b_buf, work = (torch.empty(size, dtype=acc, device=flat_a.device) for _ in range(3))
    dots = [
        torch.mul(ca, cb, out=work[: int(ca.numel())]).sum()
        for ca, cb in _acc_chunks(flat_a, flat_b, acc, a_buf, b_buf)
    ]
    return math.fsum(torch.stack(dots).to(torch.float64).tolist())


def polarization_factor(norm_a2: float, norm_b2: float, diff2: float) -> float:
    """How much the polarized dot product's error (relative to the norms' own) is amplified in the
    cosine: (|a|**2 + |b|**2 + |b - a|**2) / (2 |a| |b|); 1 for b == a, 3 for b == -a."""
    return (norm_a2 + norm_b2 + diff2) / (2 * math.sqrt(norm_a2) * math.sqrt(norm_b2))


def _acc_chunks(flat_a, flat_b, acc, a_buf, b_buf):
    """Pairs of chunks in the accumulation type: views where the type already is, else converted
    (exactly: half precision to float32) into the reused buffers."""
    step = _fast_chunk(flat_a)
    for start in range(0, int(flat_a.numel()), step):
        ca, cb = flat_a[start : start + step], flat_b[start : start + step]
        length = int(ca.numel())
        yield (
            ca if ca.dtype == acc else a_buf[:length].copy_(ca),
            cb if cb.dtype == acc else b_buf[:length].copy_(cb),
        )


def _fast_chunk(flat) -> int:
    return FAST_CHUNK_ELEMENTS if flat.device.type == "cpu" else DEVICE_CHUNK_ELEMENTS


def compare_sets(
    a: Mapping[str, Callable[[], Any]],
    b: Mapping[str, Callable[[], Any]],
    rtol: float,
    atol: float,
) -> dict[str, Any]:
    """Compare tensors by name; `a` and `b` map names to functions returning the tensor, so only
    one pair is in memory at a time."""
    common = [name for name in a if name in b]
    rows = {}
    for name in common:
        rows[name] = compare_pair(a[name](), b[name](), rtol, atol)
    result = {
        "rtol": rtol,
        "atol": atol,
        "n_compared": len(rows),
        "n_identical": sum(1 for r in rows.values() if r["equal"]),
        "n_close": sum(1 for r in rows.values() if r["allclose"]),
        "n_incompatible": sum(1 for r in rows.values() if not r["shape_match"]),
        "only_in_a": [name for name in a if name not in b],
        "only_in_b": [name for name in b if name not in a],
        "max_abs_diff": _max_known(r["max_abs_diff"] for r in rows.values()),
        "max_relative_error": _max_known(r["relative_error"] for r in rows.values()),
        "min_cosine_similarity": _min_known(r["cosine_similarity"] for r in rows.values()),
        "tensors": rows,
    }
    result["n_different"] = len(rows) - result["n_close"]
    result["status"], result["verdict"] = verdict(result)
    return result


def verdict(result: Mapping[str, Any]) -> tuple[str, str]:
    rows = result["tensors"]
    tolerance = f"rtol={result['rtol']:g}, atol={result['atol']:g}"
    extra = []
    if result["only_in_a"]:
        extra.append(f"{len(result['only_in_a'])} only in dump_a")
    if result["only_in_b"]:
        extra.append(f"{len(result['only_in_b'])} only in dump_b")
    tail = f" ({', '.join(extra)})" if extra else ""
    if not rows:
        a_names = ", ".join(result["only_in_a"][:3]) or "none"
        b_names = ", ".join(result["only_in_b"][:3]) or "none"
        return (
            "nothing_to_compare",
            f"nothing to compare: no tensor names in common (a: {a_names}; b: {b_names})",
        )
    mismatched = [n for n, r in rows.items() if not r["shape_match"]]
    if mismatched:
        r = rows[mismatched[0]]
        return "incompatible", (
            f"incompatible: shapes differ for {mismatched[0]}: {r['shape_a']} vs {r['shape_b']}"
            + (f" and {len(mismatched) - 1} more" if len(mismatched) > 1 else "")
            + tail
        )
    different = [n for n, r in rows.items() if not r["allclose"]]
    if different:
        worst = max(different, key=lambda n: rows[n]["max_abs_diff"] or 0.0)
        r = rows[worst]
        return "different", (
            f"different: {len(different)} of {len(rows)} tensors outside {tolerance}; worst {worst}: "
            f"max abs diff {_fmt(r['max_abs_diff'])}, cosine {_fmt(r['cosine_similarity'], 6)}, "
            f"{r['n_not_close']} of {r['n_elements']} elements off" + tail
        )
    if all(r["equal"] for r in rows.values()):
        return "identical", f"identical: {len(rows)} tensors bitwise equal" + tail
    dtype_note = "" if all(r["dtype_match"] for r in rows.values()) else ", dtypes differ"
    return "close", (
        f"close: {len(rows)} tensors within {tolerance} (max abs diff {_fmt(result['max_abs_diff'])}, "
        f"min cosine {_fmt(result['min_cosine_similarity'], 6)}{dtype_note})" + tail
    )


def _fmt(value, digits: int = 3) -> str:
    return "n/a" if value is None else f"{value:.{digits}g}"


def _max_known(values):
    known = [v for v in values if v is not None]
    return max(known) if known else None


def _min_known(values):
    known = [v for v in values if v is not None]
    return min(known) if known else None


# -- comparing dumps -----------------------------------------------------------------------------


def _dump_side(reader: DumpReader, directory: str) -> dict:
    meta = reader.metadata
    return {
        "name": reader.name,
        "size_bytes": os.path.getsize(os.path.join(directory, reader.name)),
        "created_utc": meta.get("created_utc"),
        "prompt_id": meta.get("prompt_id"),
        "dump_node_id": meta.get("dump_node_id"),
        "source_nodes": meta.get("source_nodes"),
        "encoder_family": meta.get("encoder_family"),
        "n_tensors": len(reader.names),
    }


def compare_dumps(directory: str, name_a: str, name_b: str, rtol: float, atol: float) -> dict:
    """Compare two dumps tensor by tensor (a is the reference); DumpError if one is unusable."""
    with open_dump(directory, name_a) as a, open_dump(directory, name_b) as b:
        result = compare_sets(
            {n: (lambda n=n: a.get(n)) for n in a.names},
            {n: (lambda n=n: b.get(n)) for n in b.names},
            rtol,
            atol,
        )
        result["a"], result["b"] = _dump_side(a, directory), _dump_side(b, directory)
    return result


def compare_dump_with(
    directory: str, name_a: str, tensors: Mapping[str, Any], rtol: float, atol: float
) -> dict:
    """Compare a dump (the reference) with live tensors named as collect_tensors names them."""
    with open_dump(directory, name_a) as a:
        result = compare_sets(
            {n: (lambda n=n: a.get(n)) for n in a.names},
            {n: (lambda t=t: t) for n, t in tensors.items()},
            rtol,
            atol,
        )
        result["a"] = _dump_side(a, directory)
    result["b"] = {"name": None, "live": True, "n_tensors": len(tensors)}
    return result
