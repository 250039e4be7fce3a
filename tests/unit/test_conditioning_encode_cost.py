"""What the text encoding cost (monitors/conditioning/encode_cost.py): each encode node once over
both sides, its time and memory from its profile row, the largest figures, the memory budget
(exceeded strictly above it, its reason when unknown), and the diffusion model at encode time."""

from __future__ import annotations

from monitors.conditioning.encode_cost import (
    NO_BUDGET_REASON,
    NO_MODEL_REASON,
    describe_diffusion_model,
    describe_encode,
    encoder_impact,
)

MIB = 1024 * 1024


def encoder(node_id, class_type="CLIPTextEncode", **profile) -> dict:
    return {"node_id": node_id, "class_type": class_type, "profile": profile or None}


def test_an_encoder_row_from_its_profile():
    profile = {
        "cached": False,
        "duration_s": 1.5,
        "peak_rss_bytes": 900,
        "peak_rss_above_start_bytes": 300,
        "peak_rss_at_s": 0.25,
        "rss_change_bytes": -20,
        "gpu_peaks": [
            {
                "peak_allocated_above_start_bytes": 10,
                "allocated_change_bytes": 4,
                "peak_reserved_above_start_bytes": 32,
                "reserved_change_bytes": 16,
            },
            {
                "peak_allocated_above_start_bytes": 50,
                "allocated_change_bytes": 2,
                "peak_reserved_above_start_bytes": 64,
                "reserved_change_bytes": 8,
            },
            {"peak_allocated_above_start_bytes": "n/a"},
            "not a mapping",
        ],
    }
    row = encoder_impact({"node_id": "6", "class_type": "CLIPTextEncode", "profile": profile}, ["positive"])
    assert row == {
        "node_id": "6",
        "class_type": "CLIPTextEncode",
        "sides": ["positive"],
        "cached": False,
        "duration_s": 1.5,
        "memory_above_start_bytes": 50,  # the GPU peak wins over RSS
        "peak_rss_bytes": 900,
        "peak_rss_above_start_bytes": 300,
        "peak_rss_at_s": 0.25,
        "rss_change_bytes": -20,
        "peak_gpu_allocated_above_start_bytes": 50,
        "gpu_allocated_change_bytes": 4,
        "peak_gpu_reserved_above_start_bytes": 64,
        "gpu_reserved_change_bytes": 16,
    }


def test_an_encoder_without_a_profile_knows_nothing():
    row = encoder_impact({"node_id": 3}, [])
    assert row["class_type"] is None
    assert all(row[k] is None for k in row if k not in ("node_id", "sides"))
    assert encoder_impact({"profile": {"gpu_peaks": []}}, [])["peak_gpu_allocated_above_start_bytes"] is None


def test_each_encode_node_once_with_the_sides_it_fed():
    shared = encoder("6", duration_s=2.0, peak_rss_above_start_bytes=100)
    sides = {
        "positive": {"encoders": [shared, encoder(7, duration_s=0.5, peak_rss_above_start_bytes=400)]},
        "negative": {"encoders": [encoder(6, duration_s=9.0)]},  # the same node id (as text): first kept
    }
    encode, findings = describe_encode(sides, None)
    assert encode["n_encoders"] == 2
    assert [e["node_id"] for e in encode["encoders"]] == ["6", 7]
    assert [e["sides"] for e in encode["encoders"]] == [["positive", "negative"], ["positive"]]
    assert encode["total_s"] == 2.5
    assert encode["peak_above_start_bytes"] == 400
    assert encode["peak_rss_above_start_bytes"] == 400
    assert encode["peak_gpu_allocated_above_start_bytes"] is None
    assert encode["memory_budget"] == {
        "budget_bytes": None,
        "exceeded": None,
        "unknown_reason": NO_BUDGET_REASON,
    }
    assert findings == []


def test_no_encoder_at_all():
    encode, findings = describe_encode({"positive": {}, "negative": {"encoders": None}}, 0)
    assert encode["n_encoders"] == 0
    assert encode["total_s"] is None
    assert encode["peak_above_start_bytes"] is None
    assert encode["memory_budget"]["unknown_reason"] == NO_BUDGET_REASON
    assert encode["memory_budget"]["budget_bytes"] is None
    assert findings == []


def test_the_budget_is_exceeded_strictly_above_it_per_node():
    sides = {
        "positive": {
            "encoders": [
                encoder("1", "CLIPTextEncode", peak_rss_above_start_bytes=200 * MIB),
                encoder(
                    "2", "CLIPTextEncodeSDXL", gpu_peaks=[{"peak_allocated_above_start_bytes": 300 * MIB}]
                ),
                encoder("3", "CLIPTextEncode", cached=True),
            ]
        }
    }
    at_peak, findings = describe_encode(sides, 300 * MIB)
    assert at_peak["memory_budget"] == {"budget_bytes": 300 * MIB, "exceeded": False, "unknown_reason": None}
    assert findings == []
    below, findings = describe_encode(sides, 250 * MIB)
    assert below["memory_budget"]["exceeded"] is True
    assert below["peak_above_start_bytes"] == 300 * MIB
    assert below["peak_gpu_allocated_above_start_bytes"] == 300 * MIB
    assert below["peak_rss_above_start_bytes"] == 200 * MIB
    assert findings == [
        (
            "warning",
            "text encode node 2 (CLIPTextEncodeSDXL) needed 300.0 MiB, above the memory budget of 250.0 MiB",
            "memory_budget_exceeded",
        )
    ]
    _, findings = describe_encode(sides, 100 * MIB)
    assert [f[1].split(" (")[0] for f in findings] == ["text encode node 1", "text encode node 2"]


def test_a_budget_without_any_measured_node():
    sides = {"positive": {"encoders": [encoder("1", cached=True)]}}
    encode, findings = describe_encode(sides, MIB)
    assert encode["memory_budget"] == {
        "budget_bytes": MIB,
        "exceeded": None,
        "unknown_reason": "no encode node's memory was measured (cached, or not profiled)",
    }
    assert findings == []


class _Module:
    pass


class _Patcher:
    """A stand-in ModelPatcher: patches, a module, devices."""

    def __init__(self):
        self.model = _Module()
        self.patches = {}
        self.patches_uuid = "u-1"
        self.load_device = "cpu"
        self.offload_device = "cpu"


def test_no_model_connected():
    assert describe_diffusion_model(None) == {
        "object_id": None,
        "class": None,
        "module_class": None,
        "device": None,
        "unknown_reason": NO_MODEL_REASON,
    }


def test_a_model_described():
    model = _Patcher()
    info = describe_diffusion_model(model)
    assert info["object_id"] == id(model)
    assert info["class"] == "_Patcher"
    assert info["module_class"] == "_Module"
    assert info["unknown_reason"] is None
    assert set(info) == {
        "object_id",
        "class",
        "module_class",
        "model_type",
        "device",
        "load_device",
        "patches_uuid",
        "unknown_reason",
    }


def test_a_model_that_cannot_be_described_keeps_its_class(monkeypatch):
    import monitors.conditioning.encode_cost as encode_cost

    def broken(model):
        raise RuntimeError("no weights")

    monkeypatch.setattr(encode_cost, "describe_model", broken)
    model = _Patcher()
    assert describe_diffusion_model(model) == {
        "object_id": id(model),
        "class": "_Patcher",
        "module_class": None,
        "device": None,
        "unknown_reason": "describing the model failed: RuntimeError: no weights",
    }
