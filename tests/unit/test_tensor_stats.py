import math
import threading

import pytest

torch = pytest.importorskip("torch")

from monitors.numeric import tensor_stats  # noqa: E402
from monitors.numeric.tensor_stats import describe_tensor, stats_error_bound, value_stats  # noqa: E402


def _bound_of(reference, accumulate_float64=False):
    """The documented error bound, from the float64 reference values themselves."""
    ref = reference.double()
    return stats_error_bound(
        float(ref.abs().mean()), float((ref * ref).mean()), float(ref.mean()), accumulate_float64
    )


def test_matches_torch_on_finite_values_and_counts_nan_inf(monkeypatch):
    monkeypatch.setattr(tensor_stats, "CHUNK_ELEMENTS", 7)  # force several chunks
    values = torch.randn(5, 9, dtype=torch.float32)
    values[0, 0] = float("nan")
    values[1, 1] = float("inf")
    values[2, 2] = -float("inf")
    info = describe_tensor(values)
    finite = values[torch.isfinite(values)].double()
    assert info["shape"] == [5, 9] and info["dtype"] == "float32" and info["bytes"] == 45 * 4
    assert info["n_nan"] == 1 and info["n_inf"] == 2
    bound = _bound_of(finite)
    assert abs(info["mean"] - float(finite.mean())) <= bound["mean"]
    assert abs(info["std"] - float(finite.std(unbiased=False))) <= bound["std"]
    assert info["min"] == float(finite.min()) and info["max"] == float(finite.max())


@pytest.mark.parametrize(
    "tensor",
    [
        torch.empty(0, 4),
        torch.tensor(3.5),
        torch.full((3,), float("nan")),
        torch.arange(6, dtype=torch.int64).reshape(2, 3),
    ],
)
def test_edge_cases(tensor):
    info = describe_tensor(tensor)
    assert info["n_elements"] == tensor.numel()
    if tensor.numel() == 0 or (tensor.is_floating_point() and torch.isnan(tensor).all()):
        assert info["min"] is None and info["mean"] is None
    else:
        assert info["min"] is not None and math.isfinite(info["mean"])


def test_half_precision_is_summed_in_double():
    info = describe_tensor(torch.full((70000,), 1.0, dtype=torch.float16))
    assert info["mean"] == 1.0 and info["std"] == 0.0


REFERENCE_CASES = {
    "normal": lambda g, n: torch.randn(n, generator=g),
    "offset": lambda g, n: 100.0 + torch.randn(n, generator=g),  # mean**2 >> variance: cancellation
    "uniform_positive": lambda g, n: torch.rand(n, generator=g) * 1e4,
    "heavy_tail": lambda g, n: torch.randn(n, generator=g) ** 5,
    "tiny": lambda g, n: torch.randn(n, generator=g) * 1e-30,
}


@pytest.mark.parametrize("case", sorted(REFERENCE_CASES))
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float64])
@pytest.mark.parametrize("chunk", [1000, None])
def test_within_the_documented_bound_of_a_float64_reference(monkeypatch, case, dtype, chunk):
    if chunk is not None:
        monkeypatch.setattr(tensor_stats, "CHUNK_ELEMENTS", chunk)
    values = REFERENCE_CASES[case](torch.Generator().manual_seed(3), 300_001).to(dtype)
    if dtype in (torch.float16, torch.bfloat16) and case in ("tiny",):
        values = values + 1  # tiny values underflow in half precision; keep the case meaningful
    ref = values.double()
    stats = value_stats(values)
    bound = _bound_of(ref, accumulate_float64=dtype == torch.float64)
    assert stats["min"] == float(ref.min()) and stats["max"] == float(ref.max())  # exact
    assert stats["n_nan"] == 0 and stats["n_inf"] == 0
    assert abs(stats["mean"] - float(ref.mean())) <= bound["mean"]
    assert abs(stats["std"] - float(ref.std(unbiased=False))) <= bound["std"]


def test_the_bound_is_tight_enough_to_mean_something():
    values = torch.randn(1 << 20, generator=torch.Generator().manual_seed(1))
    bound = _bound_of(values)
    assert bound["mean"] < 1e-4 and bound["std"] < 1e-2


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_nan_inf_counted_exactly_across_chunks_without_changing_finite_statistics(monkeypatch, dtype):
    monkeypatch.setattr(tensor_stats, "CHUNK_ELEMENTS", 64)
    values = torch.randn(1000, generator=torch.Generator().manual_seed(2)).to(dtype)
    values[5] = values[700] = float("nan")
    values[64:128] = float("inf")  # one whole chunk without a finite value
    values[999] = -float("inf")
    finite = values[torch.isfinite(values)].double()
    stats = value_stats(values)
    bound = _bound_of(finite)
    assert (stats["n_nan"], stats["n_inf"]) == (2, 65)
    assert stats["min"] == float(finite.min()) and stats["max"] == float(finite.max())
    assert abs(stats["mean"] - float(finite.mean())) <= bound["mean"]
    assert abs(stats["std"] - float(finite.std(unbiased=False))) <= bound["std"]


def test_float32_overflow_of_the_sums_falls_back_to_exact_float64():
    values = torch.tensor([3e38, 3e38, -1e38, 2e38], dtype=torch.float32)  # sum and squares overflow
    stats = value_stats(values)
    ref = values.double()
    assert stats["mean"] == pytest.approx(float(ref.mean()), rel=1e-12)
    assert stats["std"] == pytest.approx(float(ref.std(unbiased=False)), rel=1e-9)
    assert stats["n_inf"] == 0


def test_one_read_back_per_tensor(monkeypatch):
    """The common case reads results back once (one host sync on a GPU), however many chunks."""
    monkeypatch.setattr(tensor_stats, "CHUNK_ELEMENTS", 100)
    calls = []
    original = torch.Tensor.tolist

    def counting_tolist(self):
        calls.append(self.shape)
        return original(self)

    monkeypatch.setattr(torch.Tensor, "tolist", counting_tolist)
    monkeypatch.setattr(torch.Tensor, "item", lambda self: pytest.fail("item() syncs per call"))
    monkeypatch.setattr(torch.Tensor, "__float__", lambda self: pytest.fail("float() syncs per call"))
    value_stats(torch.randn(10_000))
    assert len(calls) == 1
    values = torch.randn(10_000)
    values[3] = float("nan")
    calls.clear()
    value_stats(values)
    assert len(calls) == 2  # the fast pass, then the masked pass that counts


def test_default_chunks_of_a_large_offset_tensor_stay_within_the_bound():
    """Long sequential float32 accumulations (vector_norm, dot on the CPU) break the bound here."""
    values = 100.0 + torch.rand((1 << 21) + 5, generator=torch.Generator().manual_seed(4))
    ref = values.double()
    stats = value_stats(values)
    bound = _bound_of(ref)
    assert abs(stats["mean"] - float(ref.mean())) <= bound["mean"]
    assert abs(stats["std"] - float(ref.std(unbiased=False))) <= bound["std"]
    assert stats["min"] == float(ref.min()) and stats["max"] == float(ref.max())


def test_cpu_chunks_run_on_one_intra_op_thread_and_the_count_is_restored(monkeypatch):
    # Kept patch of a private name: the thread count while the chunks are reduced is seen only
    # from inside the reduction, and a failure inside it only by making it fail.
    before = torch.get_num_threads()
    seen = []
    original = tensor_stats._chunk_reductions

    def spy(flat, acc):
        seen.append(torch.get_num_threads())
        return original(flat, acc)

    monkeypatch.setattr(tensor_stats, "_chunk_reductions", spy)
    value_stats(torch.randn(tensor_stats.FLOAT64_MAX_ELEMENTS + 1))  # chunked (small ones are not)
    assert seen == [1] and torch.get_num_threads() == before

    def boom(flat, acc):
        raise RuntimeError("boom")

    monkeypatch.setattr(tensor_stats, "_chunk_reductions", boom)
    with pytest.raises(RuntimeError):
        value_stats(torch.randn(tensor_stats.FLOAT64_MAX_ELEMENTS + 1))
    assert torch.get_num_threads() == before


# Known values: the error bound's formula, which accumulation a size gets, the exact float64 path.


def test_error_bound_formula_in_float32_and_float64():
    u = 2.0**-24
    mean_err = 256 * u * 1.5
    variance = 258 * u * 4.0 + 2 * 0.5 * mean_err + mean_err**2
    assert stats_error_bound(1.5, 4.0, -0.5) == {
        "mean": mean_err,
        "variance": variance,
        "std": math.sqrt(variance),
    }
    u = 2.0**-53
    mean_err = 256 * u * 1.5
    variance = 258 * u * 4.0 + 2 * 0.5 * mean_err + mean_err**2
    assert stats_error_bound(1.5, 4.0, 0.5, accumulate_float64=True)["variance"] == variance


def test_underflow_scale_is_the_smallest_normal_over_the_unit_roundoff():
    for name, dtype in (("float32", torch.float32), ("float64", torch.float64)):
        info = torch.finfo(dtype)
        assert tensor_stats.UNDERFLOW_SCALE[name] == info.tiny / (info.eps / 2)


def test_tensors_up_to_64_ki_elements_get_float64_accuracy():
    """Summed in float32, 64 Ki values near 100 would be off by about 1e-8 of the mean."""
    assert tensor_stats.FLOAT64_MAX_ELEMENTS == 2**16
    values = 100.0 + torch.rand(2**16, generator=torch.Generator().manual_seed(7))
    ref = values.double()
    stats = value_stats(values)
    assert stats["mean"] == pytest.approx(float(ref.mean()), rel=1e-13)
    assert stats["std"] == pytest.approx(float(ref.std(unbiased=False)), rel=1e-9)
    larger = value_stats(torch.cat([values, values[:1]]))  # float32 sums: within their own bound
    assert abs(larger["mean"] - float(torch.cat([ref, ref[:1]]).mean())) <= _bound_of(values)["mean"]


def test_squares_that_underflow_float32_still_give_the_true_spread():
    values = torch.tensor([1e-30, 3e-30] * 40_000, dtype=torch.float32)  # float32 squares are 0
    stats = value_stats(values)
    assert stats["mean"] == pytest.approx(2e-30, rel=1e-6) and stats["std"] == pytest.approx(1e-30, rel=1e-5)


def test_integers_are_described_exactly():
    stats = value_stats(torch.tensor([1, 2, 3]))
    assert stats == {
        "min": 1.0,
        "max": 3.0,
        "mean": 2.0,
        "std": pytest.approx(math.sqrt(2 / 3), rel=1e-15),
        "n_nan": 0,
        "n_inf": 0,
    }


def test_nan_and_inf_are_counted_when_float32_sums_overflow():
    values = torch.full((70_000,), 1e30, dtype=torch.float32)  # squares overflow float32
    values[:3] = torch.tensor([float("nan"), float("inf"), -float("inf")])
    values[3] = -1e30
    stats = value_stats(values)
    assert (stats["n_nan"], stats["n_inf"]) == (1, 2)
    finite = values[torch.isfinite(values)].double()  # the reference: the finite values in float64
    assert (stats["min"], stats["max"]) == (float(finite.min()), float(finite.max()))
    assert stats["mean"] == pytest.approx(float(finite.mean()), rel=1e-12)
    assert stats["std"] == pytest.approx(float(finite.std(unbiased=False)), rel=1e-9)


@pytest.mark.parametrize("n", [2, 70_000])
def test_a_tensor_without_a_finite_value_has_counts_and_no_statistics(n):
    values = torch.tensor([float("nan"), float("inf")] * (n // 2))
    assert value_stats(values) == {
        "min": None,
        "max": None,
        "mean": None,
        "std": None,
        "n_nan": n // 2,
        "n_inf": n // 2,
    }


def test_one_cpu_thread_is_shared_by_nested_users_and_restores_the_count():
    saved = torch.get_num_threads()
    torch.set_num_threads(3)
    try:
        for _ in range(2):  # a second round: nothing of the first one's count is left over
            with tensor_stats.one_cpu_thread("cpu"):
                assert torch.get_num_threads() == 1
                with tensor_stats.one_cpu_thread("cpu"):
                    assert torch.get_num_threads() == 1
                assert torch.get_num_threads() == 1  # the outer user still holds it
            assert torch.get_num_threads() == 3
        with tensor_stats.one_cpu_thread("cuda"):  # GPU work leaves the CPU threads alone
            assert torch.get_num_threads() == 3
    finally:
        torch.set_num_threads(saved)


def test_one_cpu_thread_on_two_threads_puts_back_each_threads_own_count():
    """The writer thread and the prompt overlap: the thread that entered first and left first gets
    its count back (a count shared over threads left it on one thread for good)."""
    steps = {name: threading.Event() for name in ("b_ready", "a_in", "b_in", "a_out")}
    seen = {}

    def second_user():
        # A thread takes torch's last count on its first use, then keeps its own.
        torch.set_num_threads(3)
        seen["b_before"] = torch.get_num_threads()
        steps["b_ready"].set()
        steps["a_in"].wait()
        with tensor_stats.one_cpu_thread("cpu"):
            seen["b_inside"] = torch.get_num_threads()
            steps["b_in"].set()
            steps["a_out"].wait()
        seen["b_after"] = torch.get_num_threads()

    saved = torch.get_num_threads()
    torch.set_num_threads(2)
    other = threading.Thread(target=second_user)
    other.start()
    try:
        steps["b_ready"].wait()
        with tensor_stats.one_cpu_thread("cpu"):
            seen["a_inside"] = torch.get_num_threads()
            steps["a_in"].set()
            steps["b_in"].wait()
        seen["a_after"] = torch.get_num_threads()
        steps["a_out"].set()
        other.join()
    finally:
        steps["a_out"].set()
        torch.set_num_threads(saved)
    assert seen == {"b_before": 3, "a_inside": 1, "b_inside": 1, "a_after": 2, "b_after": 3}


def test_one_cpu_thread_on_a_thread_already_on_one_leaves_torch_alone():
    """Setting torch's count also sets the count new threads start on: a thread already on one
    (the dump writer, started while the prompt held one) must not set it to one, on entry or exit."""
    steps = {name: threading.Event() for name in ("on_one", "raised", "held", "done")}
    started_on = []

    def on_one():
        torch.get_num_threads()  # its first use: from now on the count is its own
        torch.set_num_threads(1)
        steps["on_one"].set()
        steps["raised"].wait()
        with tensor_stats.one_cpu_thread("cpu"):
            steps["held"].set()
            steps["done"].wait()

    def start_a_thread():
        new_thread = threading.Thread(target=lambda: started_on.append(torch.get_num_threads()))
        new_thread.start()
        new_thread.join()

    saved = torch.get_num_threads()
    worker = threading.Thread(target=on_one)
    worker.start()
    try:
        steps["on_one"].wait()
        torch.set_num_threads(2)  # the prompt thread puts its own count back
        steps["raised"].set()
        steps["held"].wait()
        start_a_thread()
        steps["done"].set()
        worker.join()
        start_a_thread()
    finally:
        steps["raised"].set()
        steps["done"].set()
        torch.set_num_threads(saved)
    assert started_on == [2, 2]


class _Allocations(torch.overrides.TorchFunctionMode):
    """Records the size of every torch.empty made while it is active (a fake of the backend)."""

    def __init__(self):
        super().__init__()
        self.sizes = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func is torch.empty:
            self.sizes.append(math.prod(args[0]) if isinstance(args[0], (tuple, list)) else args[0])
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])  # converted in a reused buffer
def test_a_tensor_below_one_chunk_gets_buffers_no_larger_than_itself(dtype):
    n = tensor_stats.FLOAT64_MAX_ELEMENTS + 5  # chunked (float32 sums), far below one chunk
    assert n < tensor_stats.CHUNK_ELEMENTS
    values = torch.linspace(-1, 1, n).to(dtype)
    with _Allocations() as allocations:
        stats = value_stats(values)
    assert stats["min"] == -1.0 and stats["max"] == 1.0
    assert allocations.sizes and max(allocations.sizes) <= n
