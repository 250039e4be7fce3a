"""Fused CPU kernels for tensor statistics and comparisons: every figure of a chunk in one pass.

Eager torch reduces a chunk with one kernel per figure (min and max, sum, row norms; a comparison
takes a dozen: the difference, three norms, the tolerance, the count...), each a pass over the
chunk. torch.compile (Inductor) turns the same expressions into one C++ loop over the chunk, which
reads it once: value_stats within ~1x of a single aminmax + sum pass instead of 1.2-2.4x, and a
comparison within ~1x of aminmax + sum over both inputs instead of 2-3.6x (bench/tensor_stats.py).

The figures and their error bound are those of the eager kernels (tensor_stats' and
dumps/compare's docstrings): rows of rows.ROW_ELEMENTS summed in float32, the row results
summed in float64; min, max and the count outside tolerance exact (Inductor compiles without
floating-point contraction, so atol + rtol*|a| is rounded as torch.isclose rounds it). The
comparison sums the products a*b directly instead of polarizing the norms.

Compiling takes 3-15 s of one CPU core, about 220 MB of memory for the compiler, and a C++
compiler, so it never happens in the caller's path and only where it pays: in mode `auto` (the
default) once the eager kernels have reduced COMPILE_AFTER_EAGER_ELEMENTS the fused ones could
have, in mode `on` at the first such tensor. A request starts a background thread that compiles the
kernel (once per process and per input dtype; Inductor keeps its cache on disk; the thread stays
once it has compiled, see `_compile`), and until it is
ready, or where it cannot be (no compiler, a failure: logged once, with the reason in `status()`),
callers use the eager kernels. CPU only: on a GPU the eager kernels already stream at memory speed, and Triton
contracts multiply-adds, which would change the tolerance count's rounding.

PIPELINE_MONITOR_FUSED_KERNELS=auto|on|off; off keeps every computation on the eager kernels.
"""

from __future__ import annotations

import atexit
import contextlib
import itertools
import logging
import os
import threading
import types
from collections.abc import Callable

from ..background import BackgroundWorker
from .rows import ROW_ELEMENTS

log = logging.getLogger(__name__)

SETTING = "PIPELINE_MONITOR_FUSED_KERNELS"
# The one chunk length kernels are compiled for (a new length would compile again): the chunks of
# tensor_stats and dumps.compare; their shorter last chunk takes the eager kernels.
FUSED_CHUNK_ELEMENTS = 1 << 20
# The compiling thread ends once idle (the pack leaves no idle thread) until it has run torch.compile:
# then it stays (FusedKernels._compile).
WORKER_IDLE_EXIT_S = 5.0
EXIT_WAIT_S = 120  # at interpreter exit, for a compile under way (3-15 s) to finish
MODES = ("auto", "on", "off")
# Mode auto compiles once the eager kernels have reduced this many elements the fused ones could
# have (16 GB of float32, a second or more of eager work): the compiler costs 3-15 s of one core and
# about 220 MB of memory once per process, worth it for a process that keeps reducing large CPU
# tensors, not for one that meets a few.
COMPILE_AFTER_EAGER_ELEMENTS = 1 << 32
# Input dtypes with a float32 accumulation (float64 tensors keep the eager float64 path).
FUSED_DTYPE_NAMES = ("float32", "float16", "bfloat16")


def _stats_rows(chunk):
    """min, max (float32), sum and sum of squares (float64) of one chunk."""
    rows = chunk.view(-1, ROW_ELEMENTS).float()
    return rows.amin(), rows.amax(), rows.sum(1).double().sum(), (rows * rows).sum(1).double().sum()


def _compare_rows(chunk_a, chunk_b, rtol, atol):
    """max |b - a| (float32), sum |b - a|, the count outside tolerance, |a|^2, |b|^2, |b - a|^2 and
    a.b of one pair of chunks; `rtol`, `atol`: float32 0-dim tensors (torch.isclose's rounding)."""
    a = chunk_a.view(-1, ROW_ELEMENTS).float()
    b = chunk_b.view(-1, ROW_ELEMENTS).float()
    diff = b - a
    abs_diff = diff.abs()
    allowed = atol + rtol * a.abs()

    def row_sums(x):
        return x.sum(1).double().sum()

    return (
        abs_diff.amax(),
        row_sums(abs_diff),
        (abs_diff > allowed).sum(),
        row_sums(a * a),
        row_sums(b * b),
        row_sums(diff * diff),
        row_sums(a * b),
    )


class FusedKernels:
    """Compiled kernels by input dtypes and thread count, compiled one at a time on a background
    thread; `stats_chunks` and `compare_chunks` run them over a tensor's full chunks."""

    def __init__(self, mode: str | None = None, compile_fn: Callable | None = None):
        if mode is None:
            mode = os.environ.get(SETTING, "auto").strip().lower()
        if mode not in MODES:
            log.warning("pipeline monitor: %s=%r is not one of %s: auto", SETTING, mode, "|".join(MODES))
            mode = "auto"
        self.mode = mode
        self.eager_elements = 0  # eligible elements reduced by the eager kernels so far (mode auto)
        self._compile_fn = compile_fn
        self._lock = threading.Lock()
        self._ready: dict[tuple, Callable] = {}
        self._requested: set[tuple] = set()
        self._worker = BackgroundWorker("pipeline-monitor-fused-kernels", WORKER_IDLE_EXIT_S)
        self._exiting = False
        self._atexit_registered = False
        self.failure_reason: str | None = None if mode != "off" else f"{SETTING}=off"

    def stats_chunks(self, flat) -> tuple[list, int]:
        """value_stats' figures of each full chunk of the 1-D tensor `flat` (min, max, sum, sum of
        squares: 0-dim tensors), and how many elements that covers: ([], 0) until the kernel for
        its dtype is ready, or where it does not apply (not a plain float32 or half tensor on the
        CPU with a full chunk)."""
        kernel = self._get(("stats", _dtype_name(flat.dtype)), flat)
        if kernel is None:
            return [], 0
        done = int(flat.numel()) // FUSED_CHUNK_ELEMENTS * FUSED_CHUNK_ELEMENTS
        with calling():
            parts = [
                kernel(flat[start : start + FUSED_CHUNK_ELEMENTS])
                for start in range(0, done, FUSED_CHUNK_ELEMENTS)
            ]
        return parts, done

    def compare_chunks(self, flat_a, flat_b, rtol: float, atol: float) -> tuple[list, int]:
        """compare_pair's figures of each pair of full chunks (max |b - a|, sum |b - a|, count
        outside tolerance, |a|^2, |b|^2, |b - a|^2, a.b: a float64 tensor each), and how many
        elements that covers; ([], 0) as stats_chunks."""
        key = ("compare", _dtype_name(flat_a.dtype), _dtype_name(flat_b.dtype))
        kernel = self._get(key, flat_a, flat_b)
        if kernel is None:
            return [], 0
        import torch

        done = int(flat_a.numel()) // FUSED_CHUNK_ELEMENTS * FUSED_CHUNK_ELEMENTS
        parts = []
        with calling():
            rtol_t, atol_t = tolerances(rtol, atol)  # not inference tensors: as compiled
            for start in range(0, done, FUSED_CHUNK_ELEMENTS):
                end = start + FUSED_CHUNK_ELEMENTS
                figures = kernel(flat_a[start:end], flat_b[start:end], rtol_t, atol_t)
                parts.append(torch.stack([x.to(torch.float64) for x in figures]))
        return parts, done

    def _get(self, key: tuple, *tensors) -> Callable | None:
        import torch

        if self.failure_reason is not None or not all(
            type(t) is torch.Tensor and t.device.type == "cpu" and int(t.numel()) >= FUSED_CHUNK_ELEMENTS
            for t in tensors
        ):
            return None
        if not all(name in FUSED_DTYPE_NAMES for name in key[1:]):
            return None
        # torch.compile guards on the caller's thread count: a kernel per count (usually one)
        key = (*key, torch.get_num_threads())
        kernel = self._ready.get(key)
        if kernel is not None:
            return kernel
        if self.mode == "auto" and self.eager_elements < COMPILE_AFTER_EAGER_ELEMENTS:
            self.eager_elements += int(tensors[0].numel())  # not yet worth the compiler's cost
            return None
        with self._lock:
            if key not in self._requested:
                self._requested.add(key)
                if not self._atexit_registered:
                    log.info("pipeline monitor: compiling fused statistics kernels in the background")
                    atexit.register(self._finish_at_exit)
                    self._atexit_registered = True
                self._worker.submit(lambda: self._compile_one(key))
        return None

    def _finish_at_exit(self) -> None:
        """An interpreter that exits in the middle of a compile aborts (the compiler's C++ threads
        are torn down): let the compile under way finish, and start no other."""
        self._exiting = True
        self.wait_idle(EXIT_WAIT_S)

    def _compile_one(self, key: tuple) -> None:
        if self._exiting or self.failure_reason is not None:
            self._requested.discard(key)
            return
        try:
            self._ready[key] = self._compile(key)
        except Exception as exc:  # no compiler, an unsupported platform: eager from now on
            self._requested.discard(key)
            self.failure_reason = f"torch.compile failed: {type(exc).__name__}: {str(exc)[:300]}"
            log.warning(
                "pipeline monitor: fused statistics kernels unavailable, eager kernels used (%s)",
                self.failure_reason,
            )

    def _compile(self, key: tuple) -> Callable:
        """Compile by running the kernel on zeros in every variant callers run it in: the same grad
        mode (`calling`) and thread count, inputs that are inference tensors (ComfyUI runs nodes in
        inference mode) or not. torch.compile keeps at most 8 variants per code object, so each
        kernel gets a copy of its function's code."""
        import torch

        kind, *dtype_names, threads = key
        if self._compile_fn is None:
            # torch.compile keeps state owned by the thread that first compiled: with a CUDA build
            # of torch 2.11 and no visible GPU, tracing installs a no-op CUDA device guard that
            # ends with that thread, and the next compile, on a new thread, crashed the process
            # (a segmentation fault). Every kernel is compiled on this one thread, which stays.
            self._worker.stay()
        function = _stats_rows if kind == "stats" else _compare_rows
        copy = types.FunctionType(function.__code__.replace(), function.__globals__, function.__name__)
        compiled = (self._compile_fn or _torch_compile)(copy)
        saved_threads = torch.get_num_threads()
        if saved_threads != threads:
            torch.set_num_threads(threads)
        try:
            for inference in itertools.product((False, True), repeat=len(dtype_names)):
                inputs = [
                    _zeros(getattr(torch, name), flag)
                    for name, flag in zip(dtype_names, inference, strict=True)
                ]
                if kind == "compare":
                    inputs += tolerances(0.0, 0.0)
                with calling():
                    compiled(*inputs)
        finally:
            if saved_threads != threads:
                torch.set_num_threads(saved_threads)
        return compiled

    def wait_idle(self, timeout_s: float) -> bool:
        """Tests and benches: wait until every requested kernel is compiled (or failed)."""
        return self._worker.wait_idle(timeout_s)

    def status(self) -> dict:
        def names(keys):
            return sorted(" ".join(map(str, key[:-1])) for key in keys)

        return {
            "mode": self.mode,
            "ready": names(self._ready),
            "compiling": names(self._requested - set(self._ready)),
            "failure_reason": self.failure_reason,
        }


def _zeros(dtype, inference: bool):
    import torch

    with torch.inference_mode(inference):
        return torch.zeros(FUSED_CHUNK_ELEMENTS, dtype=dtype)


def _torch_compile(fn):
    import torch

    # One thread per kernel, as the eager path (tensor_stats.one_cpu_thread); compiled in this
    # process rather than in a pool of compiler workers.
    return torch.compile(fn, dynamic=False, fullgraph=True, options={"cpp.threads": 1, "compile_threads": 1})


@contextlib.contextmanager
def calling():
    """The grad mode kernels are compiled and called in: a different one (ComfyUI runs nodes in
    inference mode) would make torch.compile compile again, in the caller's path."""
    import torch

    with torch.inference_mode(False), torch.no_grad():
        yield


def tolerances(rtol: float, atol: float):
    """rtol and atol as float32 0-dim tensors: torch.isclose on float32 rounds them to float32 too,
    and torch.compile would compile again for every new Python float."""
    import torch

    return torch.tensor(rtol, dtype=torch.float32), torch.tensor(atol, dtype=torch.float32)


def _dtype_name(dtype) -> str:
    return str(dtype).replace("torch.", "")


KERNELS = FusedKernels()
