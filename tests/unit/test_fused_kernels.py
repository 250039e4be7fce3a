"""The fused CPU kernels (monitors/numeric/fused_kernels.py): compiled by torch.compile on a background thread,
the same figures as the eager kernels within the documented bound, exact min/max and tolerance
counts, NaN and Inf still found, never a compile in the caller's path, and the eager kernels
wherever compiling fails or is turned off.

The compiling tests share one module-scoped set of kernels (a first compile takes 3-15 s)."""

from __future__ import annotations

import logging
import math
import os
import threading

import pytest

torch = pytest.importorskip("torch")

from monitors.dumps import compare  # noqa: E402
from monitors.dumps.compare import compare_pair  # noqa: E402
from monitors.numeric import fused_kernels, tensor_stats  # noqa: E402
from monitors.numeric.fused_kernels import FUSED_CHUNK_ELEMENTS, FusedKernels  # noqa: E402
from monitors.numeric.tensor_stats import one_cpu_thread, stats_error_bound, value_stats  # noqa: E402

COMPILE_WATCHDOG_S = 600  # a hang watchdog: a first compile takes seconds
# Two full chunks and a shorter last one: fused, fused, eager.
N = 2 * FUSED_CHUNK_ELEMENTS + 4099


def use_kernels(monkeypatch, kernels) -> None:
    """`kernels` as the module's, in each module that holds it (imported at its top)."""
    for module in (fused_kernels, tensor_stats, compare):
        monkeypatch.setattr(module, "KERNELS", kernels)


@pytest.fixture(scope="module")
def compiled():
    """Real torch.compile kernels for float32 and float16, ready before the tests use them."""
    kernels = FusedKernels(mode="on")
    for dtype in (torch.float32, torch.float16):
        values = torch.zeros(FUSED_CHUNK_ELEMENTS, dtype=dtype)
        assert kernels.stats_chunks(values) == ([], 0)  # requested, compiled in the background
        assert kernels.compare_chunks(values, values, 1e-5, 1e-8) == ([], 0)
    assert kernels.compare_chunks(values, values.float(), 1e-5, 1e-8) == ([], 0)
    assert kernels.wait_idle(COMPILE_WATCHDOG_S)
    assert kernels.failure_reason is None, kernels.failure_reason
    return kernels


@pytest.fixture
def fused(compiled, monkeypatch):
    """The compiled kernels as the module's; the test must have run at least one of them (a test
    that silently took the eager kernels would prove nothing about the fused ones)."""
    covered = []
    for name in ("stats_chunks", "compare_chunks"):
        real = getattr(compiled, name)

        def counting(*args, real=real, **kwargs):
            parts, done = real(*args, **kwargs)
            covered.append(done)
            return parts, done

        monkeypatch.setattr(compiled, name, counting)
    use_kernels(monkeypatch, compiled)
    yield compiled
    assert any(covered), "no fused kernel ran in this test"


def _random(dtype, seed=0, scale=1.0, shift=0.0):
    generator = torch.Generator().manual_seed(seed)
    return (torch.randn(N, generator=generator) * scale + shift).to(dtype)


def test_the_callers_chunks_are_the_length_the_kernels_are_compiled_for():
    assert tensor_stats.CHUNK_ELEMENTS == FUSED_CHUNK_ELEMENTS
    assert compare.FAST_CHUNK_ELEMENTS == FUSED_CHUNK_ELEMENTS


def test_compiled_status_lists_each_kernel_ready(compiled):
    status = compiled.status()
    assert status["mode"] == "on" and status["failure_reason"] is None and status["compiling"] == []
    assert status["ready"] == [
        "compare float16 float16",
        "compare float16 float32",
        "compare float32 float32",
        "stats float16",
        "stats float32",
    ]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("shift", [0.0, 3.0])
def test_value_stats_fused_within_the_documented_bound(fused, dtype, shift):
    values = _random(dtype, shift=shift)
    stats = value_stats(values)
    reference = values.double()
    bound = stats_error_bound(
        float(reference.abs().mean()), float((reference * reference).mean()), float(reference.mean())
    )
    assert stats["min"] == float(reference.min()) and stats["max"] == float(reference.max())
    assert abs(stats["mean"] - float(reference.mean())) <= bound["mean"]
    assert abs(stats["std"] - float(reference.std(unbiased=False))) <= bound["std"]
    assert stats["n_nan"] == 0 and stats["n_inf"] == 0


def test_value_stats_fused_and_eager_agree_to_the_bound(compiled, monkeypatch):
    values = _random(torch.float32, seed=3)
    use_kernels(monkeypatch, FusedKernels(mode="off"))
    eager_stats = value_stats(values)
    use_kernels(monkeypatch, compiled)
    fused_stats = value_stats(values)
    assert fused_stats["min"] == eager_stats["min"] and fused_stats["max"] == eager_stats["max"]
    assert fused_stats["mean"] == pytest.approx(eager_stats["mean"], abs=1e-6)
    assert fused_stats["std"] == pytest.approx(eager_stats["std"], rel=1e-6)


@pytest.mark.parametrize("position", [0, FUSED_CHUNK_ELEMENTS + 17, N - 1])
@pytest.mark.parametrize("special", [math.nan, math.inf, -math.inf])
def test_value_stats_fused_still_counts_nan_and_inf(fused, position, special):
    values = _random(torch.float32, seed=1)
    values[position] = special
    stats = value_stats(values)
    finite = values[torch.isfinite(values)].double()
    assert (stats["n_nan"], stats["n_inf"]) == ((1, 0) if math.isnan(special) else (0, 1))
    assert stats["min"] == float(finite.min()) and stats["max"] == float(finite.max())
    assert stats["mean"] == pytest.approx(float(finite.mean()), abs=1e-6)


def test_value_stats_float16_overflowing_float16_stays_finite(fused):
    values = torch.full((N,), 60000.0, dtype=torch.float16)
    values[::2] = -60000.0
    stats = value_stats(values)
    assert stats["min"] == -60000.0 and stats["max"] == 60000.0
    assert stats["mean"] == pytest.approx(-60000.0 / N, abs=1e-6)
    assert stats["std"] == pytest.approx(60000.0, rel=1e-6)


@pytest.mark.parametrize(
    "dtype_a,dtype_b",
    [(torch.float32, torch.float32), (torch.float16, torch.float16), (torch.float16, torch.float32)],
)
def test_compare_pair_fused_matches_isclose_and_float64(fused, dtype_a, dtype_b):
    a = _random(dtype_a, seed=4)
    b = (a.float() + 1e-3 * _random(torch.float32, seed=5)).to(dtype_b)
    row = compare_pair(a, b, 1e-3, 1e-4)
    fa, fb = a.float(), b.float()
    assert row["n_not_close"] == int((~torch.isclose(fb, fa, 1e-3, 1e-4)).sum())
    diff = (fb - fa).abs()
    assert row["max_abs_diff"] == float(diff.max())
    da, db = fa.double(), fb.double()
    exact_diff = db - da
    assert row["mean_abs_diff"] == pytest.approx(float(exact_diff.abs().mean()), rel=1e-5)
    assert row["relative_error"] == pytest.approx(float(exact_diff.norm() / da.norm()), rel=1e-5)
    cosine = float(torch.dot(da, db) / (da.norm() * db.norm()))
    assert row["cosine_similarity"] == pytest.approx(cosine, abs=1e-6)
    assert row["allclose"] is False and row["equal"] is False


def test_compare_pair_fused_count_on_the_tolerance_boundary(fused):
    """b - a equal to atol + rtol*|a| as float32 rounds it: only torch.isclose's own rounding, with no
    multiply-add contraction, gives torch.isclose's count."""
    generator = torch.Generator().manual_seed(6)
    a = torch.rand(N, generator=generator) * 4
    b = a + (a.abs() * 1e-3).add(1e-4)
    row = compare_pair(a, b, 1e-3, 1e-4)
    assert 0 < row["n_not_close"] < N
    assert row["n_not_close"] == int((~torch.isclose(b, a, 1e-3, 1e-4)).sum())


def test_compare_pair_fused_identical_and_opposite(fused):
    a = _random(torch.float32, seed=7)
    same = compare_pair(a, a.clone(), 1e-5, 1e-8)
    assert same["equal"] is True and same["n_not_close"] == 0 and same["max_abs_diff"] == 0.0
    assert same["cosine_similarity"] == pytest.approx(1.0, abs=1e-7)
    opposite = compare_pair(a, -a, 1e-5, 1e-8)
    assert opposite["cosine_similarity"] == pytest.approx(-1.0, abs=1e-7)
    assert opposite["relative_error"] == pytest.approx(2.0, rel=1e-6)


@pytest.mark.parametrize("special", [math.nan, math.inf])
def test_compare_pair_fused_sends_nan_and_inf_to_the_float64_path(fused, special):
    a = _random(torch.float32, seed=8)
    b = a.clone()
    a[FUSED_CHUNK_ELEMENTS + 5] = special
    row = compare_pair(a, b, 1e-5, 1e-8)
    assert row["n_not_close"] == 1
    assert row["n_nan_mismatch"] == (1 if math.isnan(special) else 0)
    assert row["max_abs_diff"] == 0.0 and row["equal"] is False


def test_inference_mode_callers_do_not_compile_again(fused):
    """ComfyUI runs nodes in inference mode, on inference tensors: the kernels compiled under no_grad
    must run there as they are (fused_kernels.calling), never compiling in the node's path."""
    with torch.compiler.set_stance("fail_on_recompile"), torch.inference_mode():
        values = _random(torch.float32, seed=9)
        stats = value_stats(values)
        row = compare_pair(values, values + 1, 1e-5, 1e-8)
    assert stats["max"] == float(values.max())
    assert row["n_not_close"] == N


def _instant(fn):
    """A compile_fn that "compiles" to the function itself: the kernels' bookkeeping without a compiler."""
    return fn


def test_requests_only_for_plain_float32_and_half_tensors_with_a_full_chunk_on_the_cpu(monkeypatch):
    kernels = FusedKernels(mode="on", compile_fn=_instant)
    use_kernels(monkeypatch, kernels)
    full = torch.randn(FUSED_CHUNK_ELEMENTS)
    value_stats(torch.randn(FUSED_CHUNK_ELEMENTS - 1))  # no full chunk
    value_stats(full.double())  # float64 accumulation
    value_stats(full.to(torch.int32))
    value_stats(torch.nn.Parameter(full))  # detached: a plain tensor, but float64? no: float32, below
    compare_pair(torch.randn(100), torch.randn(100), 1e-5, 1e-8)
    compare_pair(full, full.double(), 1e-5, 1e-8)
    assert kernels.stats_chunks(full.to(torch.int8)) == ([], 0)
    assert kernels.wait_idle(COMPILE_WATCHDOG_S)
    assert kernels.status()["ready"] == ["stats float32"]  # the Parameter's plain detached values
    compare_pair(full.half(), full, 1e-5, 1e-8)
    value_stats(full.bfloat16())
    assert kernels.wait_idle(COMPILE_WATCHDOG_S)
    assert kernels.status()["ready"] == ["compare float16 float32", "stats bfloat16", "stats float32"]


def test_tensor_subclasses_take_the_eager_kernels():
    class Wrapped(torch.Tensor):
        pass

    kernels = FusedKernels(mode="on", compile_fn=lambda fn: pytest.fail("nothing should compile"))
    wrapped = torch.zeros(FUSED_CHUNK_ELEMENTS).as_subclass(Wrapped)
    assert kernels.stats_chunks(wrapped) == ([], 0)
    assert kernels.compare_chunks(wrapped, torch.zeros(FUSED_CHUNK_ELEMENTS), 0.0, 0.0) == ([], 0)
    assert kernels._worker.thread is None


def test_a_ready_kernel_covers_every_full_chunk_and_leaves_the_rest():
    kernels = FusedKernels(mode="on", compile_fn=_instant)
    values = torch.arange(N, dtype=torch.float32)
    assert kernels.stats_chunks(values) == ([], 0)
    assert kernels.wait_idle(COMPILE_WATCHDOG_S)
    parts, done = kernels.stats_chunks(values)
    assert done == 2 * FUSED_CHUNK_ELEMENTS and len(parts) == 2
    assert [float(parts[1][0]), float(parts[1][1])] == [FUSED_CHUNK_ELEMENTS, done - 1]
    assert kernels.compare_chunks(values, values + 1, 0.0, 0.5) == ([], 0)
    assert kernels.wait_idle(COMPILE_WATCHDOG_S)
    parts, done = kernels.compare_chunks(values, values + 1, 0.0, 0.5)
    assert done == 2 * FUSED_CHUNK_ELEMENTS and [len(p) for p in parts] == [7, 7]
    assert [float(x) for x in parts[0][:3]] == [1.0, FUSED_CHUNK_ELEMENTS, FUSED_CHUNK_ELEMENTS]


def test_a_kernel_per_thread_count_of_its_callers():
    kernels = FusedKernels(mode="on", compile_fn=_instant)
    values = torch.zeros(FUSED_CHUNK_ELEMENTS)
    kernels.stats_chunks(values)
    assert kernels.wait_idle(COMPILE_WATCHDOG_S)
    with one_cpu_thread("cpu"):
        one_thread = kernels.stats_chunks(values)
        assert kernels.wait_idle(COMPILE_WATCHDOG_S)
        again = kernels.stats_chunks(values)
    assert (one_thread[1], again[1]) == (
        0 if torch.get_num_threads() != 1 else FUSED_CHUNK_ELEMENTS,
        FUSED_CHUNK_ELEMENTS,
    )
    assert len(kernels._ready) == (2 if torch.get_num_threads() != 1 else 1)


def test_a_failed_compile_leaves_the_eager_kernels_with_the_reason(monkeypatch, caplog):
    def no_compiler(fn):
        raise RuntimeError("no C++ compiler found")

    kernels = FusedKernels(mode="on", compile_fn=no_compiler)
    use_kernels(monkeypatch, kernels)
    values = _random(torch.float32, seed=10)
    expected = value_stats(values)
    with caplog.at_level(logging.WARNING, logger="monitors.numeric.fused_kernels"):
        assert kernels.wait_idle(COMPILE_WATCHDOG_S)
    assert kernels.failure_reason == "torch.compile failed: RuntimeError: no C++ compiler found"
    assert "eager kernels used" in caplog.text and "no C++ compiler found" in caplog.text
    assert kernels.stats_chunks(values.half()) == ([], 0) and kernels.status()["compiling"] == []
    assert value_stats(values) == expected


def test_off_never_starts_a_thread(monkeypatch):
    monkeypatch.setenv(fused_kernels.SETTING, "off")
    kernels = FusedKernels(compile_fn=lambda fn: pytest.fail("nothing should compile"))
    assert kernels.mode == "off"
    assert kernels.stats_chunks(torch.zeros(FUSED_CHUNK_ELEMENTS)) == ([], 0)
    assert kernels._worker.thread is None
    assert kernels.status() == {
        "mode": "off",
        "ready": [],
        "compiling": [],
        "failure_reason": "PIPELINE_MONITOR_FUSED_KERNELS=off",
    }


def test_auto_is_the_default_and_an_unknown_mode_means_auto(monkeypatch, caplog):
    monkeypatch.delenv(fused_kernels.SETTING, raising=False)
    assert FusedKernels().mode == "auto"
    monkeypatch.setenv(fused_kernels.SETTING, "fast")
    with caplog.at_level(logging.WARNING, logger="monitors.numeric.fused_kernels"):
        assert FusedKernels().mode == "auto"
    assert "PIPELINE_MONITOR_FUSED_KERNELS='fast' is not one of auto|on|off" in caplog.text


def test_auto_compiles_only_once_the_eager_kernels_did_enough_work(monkeypatch):
    monkeypatch.setattr(fused_kernels, "COMPILE_AFTER_EAGER_ELEMENTS", 4 * FUSED_CHUNK_ELEMENTS)
    kernels = FusedKernels(mode="auto", compile_fn=_instant)
    small_enough = torch.zeros(FUSED_CHUNK_ELEMENTS - 1)
    values = torch.zeros(2 * FUSED_CHUNK_ELEMENTS)
    assert kernels.stats_chunks(small_enough) == ([], 0)  # not eligible: not counted
    assert kernels.stats_chunks(values) == ([], 0)
    assert kernels.eager_elements == 2 * FUSED_CHUNK_ELEMENTS and kernels.status()["compiling"] == []
    assert kernels.compare_chunks(values, values, 0.0, 0.0) == ([], 0)  # 4 Mi: the threshold is reached
    assert kernels.eager_elements == 4 * FUSED_CHUNK_ELEMENTS and kernels.status()["compiling"] == []
    assert kernels.stats_chunks(values) == ([], 0)  # requested now
    assert kernels.wait_idle(COMPILE_WATCHDOG_S)
    assert kernels.status()["ready"] == ["stats float32"]
    assert kernels.stats_chunks(values)[1] == 2 * FUSED_CHUNK_ELEMENTS


def test_each_kernel_is_compiled_once_however_many_callers_ask():
    compiles = []
    release = threading.Event()

    def counting(fn):
        compiles.append(fn.__name__)
        release.wait(5)
        return fn

    kernels = FusedKernels(mode="on", compile_fn=counting)
    values = torch.zeros(FUSED_CHUNK_ELEMENTS)
    for _ in range(3):
        assert kernels.stats_chunks(values) == ([], 0)
    assert kernels.status()["compiling"] == ["stats float32"]
    release.set()
    assert kernels.wait_idle(COMPILE_WATCHDOG_S)
    assert compiles == ["_stats_rows"]
    assert kernels.stats_chunks(values)[1] == FUSED_CHUNK_ELEMENTS


def test_exit_waits_for_the_compile_under_way_and_starts_no_other(tmp_path):
    """An interpreter exiting in the middle of a real compile aborts (exit code 134): atexit lets the
    compile under way finish, and the next queued kernel is not started."""
    import subprocess
    import sys
    from pathlib import Path

    script = tmp_path / "exit_while_compiling.py"
    script.write_text(
        "import sys, threading, time, torch\n"
        "from monitors.numeric.fused_kernels import FUSED_CHUNK_ELEMENTS, FusedKernels\n"
        "started = threading.Event()\n"
        "def slow(fn):\n"
        "    started.set()\n"
        "    time.sleep(1.0)\n"
        "    print('compiled', fn.__name__, flush=True)\n"
        "    return fn\n"
        "kernels = FusedKernels(mode='on', compile_fn=slow)\n"
        "values = torch.zeros(FUSED_CHUNK_ELEMENTS)\n"
        "kernels.stats_chunks(values)\n"
        "kernels.compare_chunks(values, values, 0.0, 0.0)\n"
        "started.wait(30)  # exit in the middle of the first compile, not before it begins\n"
        "print('exiting', flush=True)\n"
    )
    repo = Path(__file__).resolve().parents[2]
    done = subprocess.run(
        [sys.executable, str(script)],
        cwd=repo,
        env={**os.environ, "PYTHONPATH": str(repo)},
        capture_output=True,
        text=True,
        timeout=COMPILE_WATCHDOG_S,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["exiting", "compiled", "_stats_rows"]


def test_the_compiling_thread_ends_once_idle_and_comes_back(monkeypatch):
    monkeypatch.setattr(fused_kernels, "WORKER_IDLE_EXIT_S", 0.05)
    kernels = FusedKernels(mode="on", compile_fn=_instant)
    values = torch.zeros(FUSED_CHUNK_ELEMENTS)
    kernels.stats_chunks(values)
    first = kernels._worker.thread
    assert first is not None and first.name == "pipeline-monitor-fused-kernels"
    first.join(COMPILE_WATCHDOG_S)
    assert not first.is_alive() and kernels._worker.thread is None
    kernels.compare_chunks(values, values, 0.0, 0.0)
    assert kernels.wait_idle(COMPILE_WATCHDOG_S)
    assert kernels.status()["ready"] == ["compare float32 float32", "stats float32"]


def test_after_a_failed_compile_the_kernels_queued_behind_it_are_not_compiled(caplog):
    """One failure means the platform cannot compile: the others are dropped, not tried one by one."""
    calls = []
    release = threading.Event()

    def fails_once(fn):
        calls.append(fn.__name__)
        release.wait(5)
        if len(calls) == 1:
            raise RuntimeError("no C++ compiler found " + "x" * 500)
        return fn

    kernels = FusedKernels(mode="on", compile_fn=fails_once)
    values = torch.zeros(FUSED_CHUNK_ELEMENTS)
    with caplog.at_level(logging.INFO, logger="monitors.numeric.fused_kernels"):
        kernels.stats_chunks(values)
        kernels.compare_chunks(values, values, 0.0, 0.0)
        release.set()
        assert kernels.wait_idle(COMPILE_WATCHDOG_S)
    assert (
        calls == ["_stats_rows"] and kernels.status()["ready"] == [] and kernels.status()["compiling"] == []
    )
    assert kernels.failure_reason.startswith("torch.compile failed: RuntimeError: no C++ compiler found xxx")
    assert len(kernels.failure_reason) == len("torch.compile failed: RuntimeError: ") + 300  # the message cut
    assert caplog.text.count("compiling fused statistics kernels in the background") == 1


def test_the_thread_that_ran_torch_compile_stays_and_a_stand_in_compiler_leaves_none(compiled, monkeypatch):
    """torch.compile keeps state owned by the thread that compiled: with torch 2.11 (a CUDA build,
    no visible GPU) a compile on a second thread after the first had ended crashed the process.
    The real compiler's thread stays; a stand-in compiler's thread ends once idle."""
    assert compiled._worker.idle_exit_s is None and compiled._worker.thread.is_alive()
    monkeypatch.setattr(fused_kernels, "WORKER_IDLE_EXIT_S", 0.05)
    stand_in = FusedKernels(mode="on", compile_fn=_instant)
    stand_in.stats_chunks(torch.zeros(FUSED_CHUNK_ELEMENTS))
    thread = stand_in._worker.thread
    thread.join(COMPILE_WATCHDOG_S)
    assert not thread.is_alive() and stand_in._worker.idle_exit_s == 0.05


def test_a_kernel_asked_for_on_one_thread_is_compiled_for_one_thread(compiled, monkeypatch):
    """value_stats on a caller limited to one intra-op thread: the kernel is compiled (on the
    background thread, whose own count differs) for one thread, and runs there without compiling
    again in the caller's path."""
    kernels = FusedKernels(mode="on")
    values = _random(torch.float32, seed=11)
    # The compiling thread first works on the process's own count (a thread started while the
    # count is 1 would inherit it), then gets the one-thread request.
    assert kernels.stats_chunks(values.half()) == ([], 0)
    assert kernels.wait_idle(COMPILE_WATCHDOG_S) and kernels._worker.thread is not None
    seen = []
    kernels._worker.submit(lambda: seen.append(torch.get_num_threads()))
    with one_cpu_thread("cpu"):
        assert kernels.stats_chunks(values) == ([], 0)
    assert kernels.wait_idle(COMPILE_WATCHDOG_S) and kernels.failure_reason is None
    with torch.compiler.set_stance("fail_on_recompile"), one_cpu_thread("cpu"):
        parts, done = kernels.stats_chunks(values)
    assert done == 2 * FUSED_CHUNK_ELEMENTS and float(parts[0][1]) == float(
        values[:FUSED_CHUNK_ELEMENTS].max()
    )
    # The compiling thread's own count is put back once the one-thread kernel is compiled (its
    # own: the caller's may differ, see tensor_stats.one_cpu_thread).
    kernels._worker.submit(lambda: seen.append(torch.get_num_threads()))
    assert kernels.wait_idle(COMPILE_WATCHDOG_S) and seen[1:] == seen[:1]


def test_auto_by_default_leaves_a_few_large_tensors_to_the_eager_kernels():
    kernels = FusedKernels(mode="auto", compile_fn=lambda fn: pytest.fail("nothing should compile"))
    values = torch.zeros(2 * FUSED_CHUNK_ELEMENTS)
    for _ in range(3):
        assert kernels.stats_chunks(values) == ([], 0)
    assert kernels.eager_elements == 6 * FUSED_CHUNK_ELEMENTS and kernels._worker.thread is None
    assert fused_kernels.COMPILE_AFTER_EAGER_ELEMENTS == 4 * 1024**3  # 16 GB of float32, as documented
