import math

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
