"""Values that misled (issue 13), each with the test that would have caught it: a CPU fallback
claimed without an out-of-memory, throughput of a dummy latent, system-wide free memory reported
as the encode's, object reprs in reports."""

from __future__ import annotations

import json

from monitors.models.state import describe_vae
from monitors.report import OBJECT_REPR, to_jsonable
from monitors.vae.chain import run_chain
from monitors.vae.report import build_step
from tests.unit.test_vae_chain import CUDA_OOM, FakeMemory, FakeVAE, options, pixels


def _step(vae, image, **kwargs):
    return build_step("5", run_chain(vae, image, options(**kwargs)), vae_info=describe_vae(vae))


def _text(step) -> str:
    return json.dumps(to_jsonable(step))


def test_requested_cpu_claims_no_out_of_memory():
    step = _step(FakeVAE(), pixels(), strategy="cpu")
    assert step.summary["strategy_used"] == "cpu" and step.summary["n_out_of_memory"] == 0
    assert "out of memory" not in " ".join(f.message for f in step.findings)
    assert "cpu_fallback" not in [f.code for f in step.findings]


def test_cpu_after_a_gpu_out_of_memory_still_says_so():
    fail = {"direct": CUDA_OOM("CUDA out of memory"), "tiled": CUDA_OOM("CUDA out of memory")}
    step = _step(FakeVAE(fail=fail), pixels())
    fallback = [f for f in step.findings if f.code == "cpu_fallback"]
    assert fallback and "ran out of memory" in fallback[0].message


def test_cpu_reached_by_prediction_names_the_skips_not_an_out_of_memory():
    memory = FakeMemory(free=1024)  # direct and tiled predicted not to fit on the GPU
    step = _step(FakeVAE(), pixels(), memory=memory)
    assert step.summary["strategy_used"] == "cpu" and step.summary["n_out_of_memory"] == 0
    fallback = [f for f in step.findings if f.code == "cpu_fallback"]
    assert fallback and "out of memory" not in fallback[0].message
    assert "predicted not to fit" in fallback[0].message


def test_dummy_latent_has_no_throughput_and_says_why():
    fail = {s: CUDA_OOM("CUDA out of memory") for s in ("direct", "tiled", "cpu")}
    step = _step(FakeVAE(fail=fail), pixels(), allow_dummy=True)
    assert step.summary["dummy_used"] is True
    assert step.summary["frames_per_s"] is None and step.summary["input_mib_per_s"] is None
    assert "dummy" in step.details["throughput_unknown_reason"]


def test_real_encode_keeps_its_throughput():
    step = _step(FakeVAE(), pixels())
    assert step.summary["frames_per_s"] > 0 and step.details["throughput_unknown_reason"] is None


def test_free_memory_on_the_cpu_is_not_reported_as_the_encodes():
    step = _step(FakeVAE(device="cpu"), pixels())
    s = step.summary
    assert s["free_memory_change_bytes"] is None and s["free_memory_before_bytes"] is None
    assert "system" in step.details["free_memory_unknown_reason"]
    system = step.details["system_available_memory"]
    assert system["before_bytes"] == 64 * 1024**3 and "system-wide" in system["note"]
    assert s["rss_change_bytes"] is not None  # the process's own change stays


def test_gpu_free_memory_stays_a_figure():
    step = _step(FakeVAE(), pixels())
    assert step.summary["free_memory_before_bytes"] == 8 * 1024**3
    assert "free_memory_unknown_reason" not in step.details


def test_video_vae_downscale_ratio_is_numbers_or_none_with_a_reason_never_a_repr():
    vae = FakeVAE(video=True)
    info = describe_vae(vae)
    assert info["downscale_ratio"] == [None, 8, 8]
    assert "function" in info["unknown_reasons"]["downscale_ratio"]
    step = _step(vae, pixels(b=5))
    assert not OBJECT_REPR.search(_text(step))
    assert describe_vae(FakeVAE())["downscale_ratio"] == 8


def test_to_jsonable_never_writes_an_object_repr():
    class Thing:
        pass

    out = to_jsonable({"f": lambda x: x, "thing": Thing(), "nested": [Thing()]})
    assert not OBJECT_REPR.search(json.dumps(out))
    assert out["thing"].endswith("Thing")


def test_dump_reuses_the_family_the_conditioning_monitor_identified_from_the_clip():
    import gc
    import types
    import weakref

    import torch

    from monitors.conditioning.analysis import analyse_conditioning
    from monitors.dumps.collect import guess_encoder_family

    encoder = type("WanTEModel", (), {})()
    cond = [[torch.randn(1, 7, 32), {"pooled_output": None}]]  # a tiny WAN: no shape rule knows 32
    assert guess_encoder_family(cond) is None
    step = analyse_conditioning("9", cond, None, types.SimpleNamespace(cond_stage_model=encoder), None)
    assert step.summary["family"] == "WAN 2.1/2.2"
    assert guess_encoder_family(cond) == "WAN 2.1/2.2 (exact)"
    # Remembered through a weak reference: the tensor is not kept alive.
    ref = weakref.ref(cond[0][0])
    del cond, step
    gc.collect()
    assert ref() is None


def test_the_session_scan_finds_each_kind_of_false_value():
    from tests.report_validation import misleading_values

    vae_step = {
        "kind": "vae_encode",
        "summary": {"strategy_used": "cpu", "n_out_of_memory": 0, "dummy_used": False, "frames_per_s": 2.0},
        "details": {"vae": {"downscale_ratio": "<function VAE.__init__.<locals>.<lambda> at 0x7f1c2a>"}},
        "findings": [{"level": "warning", "message": "Encoded on the CPU after the GPU strategies ran out of memory"}],
    }
    dummy_step = {
        "kind": "vae_encode",
        "summary": {"strategy_used": "dummy", "dummy_used": True, "n_out_of_memory": 3, "input_mib_per_s": 1.0},
        "findings": [],
    }
    node = {"node_id": "4", "peak_rss_bytes": 100, "peak_rss_above_start_bytes": -5, "gpu_peaks": []}
    report = {"steps": [vae_step, dummy_step], "nodes": [node], "monitor_errors": ["<X object at 0xdead>"]}
    found = "\n".join(misleading_values(report))
    assert "downscale_ratio: object repr" in found and "monitor_errors[0]: object repr" in found
    assert "claims an out-of-memory" in found
    assert "input_mib_per_s 1.0 of a dummy latent" in found
    assert "below the node's own start" in found
    clean = _step(FakeVAE(), pixels())
    assert misleading_values({"steps": [to_jsonable(clean)], "nodes": []}) == []
