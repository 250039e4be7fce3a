import math

import pytest

torch = pytest.importorskip("torch")

from monitors import tensor_stats  # noqa: E402
from monitors.tensor_stats import describe_tensor  # noqa: E402


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
    assert info["mean"] == pytest.approx(float(finite.mean()), rel=1e-9)
    assert info["std"] == pytest.approx(float(finite.std(unbiased=False)), rel=1e-6)
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
