"""monitors.pipeline_profiler.suggestions on hand-made report dicts: each rule fires exactly at its bound,
says the figures it read, and GPU advice comes only for a run that had a GPU."""

import pytest

from monitors.pipeline_profiler import suggestions as sg
from monitors.report import Finding

GiB = 1024**3


def report(gpus=(), peaks=None, duration=10.0, system=None, steps=None, samples=None):
    """A run report dict: `gpus` as (device, total_bytes); `peaks` metric -> value."""
    return {
        "duration_s": duration,
        "system": {"gpus": [{"device": d, "total_bytes": t} for d, t in gpus], **(system or {})},
        "span": {"peaks": {m: {"value": v} for m, v in (peaks or {}).items()}},
        "steps": [
            {
                "kind": "profiling",
                "details": {
                    "diffusion_steps": [{"duration_s": s} for s in steps or []],
                    "samples": samples or {},
                },
            }
        ],
    }


def codes(findings):
    return [f.code for f in findings]


def by_code(findings, code):
    (found,) = [f for f in findings if f.code == code]
    return found


def phase(stage, share_pct=None, depth=0, n_errors=0, gpu=None):
    return {
        "stage": stage,
        "share_pct": share_pct,
        "depth": depth,
        "n_errors": n_errors,
        "peak_gpu_allocated_bytes": gpu,
    }


# -- devices ----------------------------------------------------------------------------------------


def test_gpu_devices_from_system_and_span_sorted():
    r = report(gpus=[("cuda:1", GiB)], peaks={"cuda:0.allocated_bytes": 1, "ram_used_bytes": 2, "cpu.x": 3})
    r["system"]["gpus"].append("not a mapping")
    r["system"]["gpus"].append({"device": None})
    assert sg.gpu_devices(r) == ["cuda:0", "cuda:1"]
    assert sg.gpu_devices({}) == []


def test_gpu_total_is_the_first_known_total_of_the_device():
    r = report(gpus=[("cuda:0", 0), ("cuda:1", 8 * GiB), ("cuda:0", 4 * GiB)])
    assert sg._gpu_total(r, "cuda:0") == 4 * GiB
    assert sg._gpu_total(r, "cuda:1") == 8 * GiB
    assert sg._gpu_total(r, "cuda:2") is None


def test_peak_reads_a_number_only():
    span = {"peaks": {"a": {"value": 5}, "b": {"value": "5"}, "c": {}}}
    assert sg._peak(span, "a") == 5
    assert sg._peak(span, "b") is None and sg._peak(span, "c") is None and sg._peak({}, "a") is None


# -- GPU rules --------------------------------------------------------------------------------------


def test_gpu_memory_near_limit_at_90_pct_of_reserved():
    at = report(
        gpus=[("cuda:0", 10 * GiB)],
        peaks={"cuda:0.reserved_bytes": 9 * GiB, "cuda:0.allocated_bytes": 1 * GiB},
    )
    found = by_code(sg.suggest(at, []), "gpu_memory_near_limit")
    assert found.level == "warning"
    assert found.message.startswith("cuda:0 memory peaked at 9.0 GiB of 10.0 GiB (90 %): keep headroom")
    below = report(gpus=[("cuda:0", 10 * GiB)], peaks={"cuda:0.reserved_bytes": 9 * GiB - 1})
    assert "gpu_memory_near_limit" not in codes(sg.suggest(below, []))


def test_gpu_memory_near_limit_reads_allocated_without_reserved():
    r = report(gpus=[("cuda:0", 10 * GiB)], peaks={"cuda:0.allocated_bytes": 19 * GiB // 2})
    assert "(95 %)" in by_code(sg.suggest(r, []), "gpu_memory_near_limit").message
    no_total = report(peaks={"cuda:0.allocated_bytes": 19 * GiB})
    assert codes(sg.suggest(no_total, [])) == []


def test_fragmentation_needs_the_ratio_and_a_gib_of_slack():
    def found(allocated, reserved):
        r = report(
            gpus=[("cuda:0", 100 * GiB)],
            peaks={"cuda:0.allocated_bytes": allocated, "cuda:0.reserved_bytes": reserved},
        )
        return [f for f in sg.suggest(r, []) if f.code == "gpu_allocator_fragmentation"]

    (at,) = found(2 * GiB, 3 * GiB)  # exactly 1.5x and exactly 1 GiB more
    assert at.level == "info"
    assert at.message == (
        "cuda:0: the allocator reserved 3.0 GiB for a peak of 2.0 GiB allocated: fragmentation; "
        "try PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"
    )
    assert found(4 * GiB, 6 * GiB - 1) == []  # under 1.5x, though 2 GiB more
    assert found(GiB, 2 * GiB - 1) == []  # 2x but under a GiB more
    assert found(0, 3 * GiB) == []  # nothing allocated: no ratio


def test_gpu_underused_from_five_samples_under_40_pct_on_a_run_of_half_a_second():
    def found(samples, duration=0.5):
        r = report(gpus=[("cuda:0", GiB)], duration=duration, samples={"cuda:0.utilization_pct": samples})
        return [f for f in sg.suggest(r, []) if f.code == "gpu_underused"]

    (at,) = found([10, 20, 30, 40, 50.0 - 1, None])  # mean 29.8 of the five numbers
    assert at.level == "info" and at.message.startswith("cuda:0 was busy 30 % of the time on average: ")
    assert found([39.0] * 5) and not found([40.0] * 5)
    assert not found([10.0] * 4 + [None])  # four numbers only
    assert not found([10.0] * 5, duration=0.49)
    assert not found([10.0] * 5, duration=None)


def test_vae_decode_gpu_memory_at_80_pct():
    r = report(gpus=[("cuda:0", 10 * GiB)])
    at = sg.suggest(r, [phase("vae_decode", gpu=8 * GiB), phase("denoise", gpu=10 * GiB)])
    found = by_code(at, "vae_decode_gpu_memory")
    assert found.level == "warning"
    assert found.message == (
        "vae_decode allocated up to 8.0 GiB of 10.0 GiB on cuda:0: decode tiled (e.g. vae.enable_tiling()) "
        "to lower the peak"
    )
    assert "vae_decode_gpu_memory" not in codes(sg.suggest(r, [phase("vae_decode", gpu=8 * GiB - 1)]))
    assert "vae_decode_gpu_memory" not in codes(sg.suggest(r, [phase("vae_decode", gpu=None)]))


def test_no_gpu_advice_without_a_gpu():
    r = report(peaks={"ram_used_bytes": 1}, samples={"cuda:0.utilization_pct": [0.0] * 9})
    assert codes(sg.suggest(r, [phase("vae_decode", gpu=100 * GiB)])) == []


# -- host rules -------------------------------------------------------------------------------------


def test_ram_near_limit_at_90_pct():
    r = report(peaks={"ram_used_bytes": 9 * GiB}, system={"ram_total_bytes": 10 * GiB})
    found = by_code(sg.suggest(r, []), "ram_near_limit")
    assert found.level == "warning"
    assert found.message.startswith(
        "system memory peaked at 9.0 GiB of 10.0 GiB: the machine is close to swapping"
    )
    below = report(peaks={"ram_used_bytes": 9 * GiB - 1}, system={"ram_total_bytes": 10 * GiB})
    assert codes(sg.suggest(below, [])) == []


def test_cpu_threads_on_a_cpu_only_run_using_fewer_threads_than_cores():
    r = report(system={"torch_num_threads": 2, "cpu_count": 4})
    assert sg.suggest(r, []) == [
        Finding(
            "info",
            "torch computes on 2 of 4 logical cores on this CPU-only run: torch.set_num_threads(4) may be faster",
            "cpu_threads",
        )
    ]
    assert codes(sg.suggest(report(system={"torch_num_threads": 4, "cpu_count": 4}), [])) == []
    assert codes(sg.suggest(report(system={"torch_num_threads": None, "cpu_count": 4}), [])) == []
    assert codes(sg.suggest(report(system={"torch_num_threads": 2, "cpu_count": "4"}), [])) == []
    gpu = report(gpus=[("cuda:0", 0)], system={"torch_num_threads": 2, "cpu_count": 4})
    assert codes(sg.suggest(gpu, [])) == []


# -- timing rules -----------------------------------------------------------------------------------


def test_stage_errors_and_the_dominant_stage():
    phases = [
        phase("decode", share_pct=70.0),
        phase("inner", share_pct=90.0, depth=1),
        phase("enc", 69.9, n_errors=2),
    ]
    found = sg.suggest(report(duration=0.5), phases)
    assert found == [
        Finding("info", "decode takes 70 % of the run: optimise there first", "dominant_stage"),
        Finding("warning", "stage enc failed 2 time(s)", "stage_errors"),
    ]
    assert codes(sg.suggest(report(duration=0.49), phases)) == ["stage_errors"]
    assert codes(sg.suggest(report(duration=None), [phase("x", share_pct=None)])) == []
    assert codes(sg.suggest(report(duration=None), [phase("x", share_pct=90.0)])) == []  # no run time


def test_first_step_warmup_at_three_times_the_median():
    found = by_code(sg.suggest(report(steps=[3.0, 1.0, 1.0, 1.0]), []), "first_step_warmup")
    assert found.message.startswith(
        "the first denoising step took 3.000 s against a median of 1.000 s: warm-up"
    )
    assert "first_step_warmup" not in codes(sg.suggest(report(steps=[2.99, 1.0, 1.0, 1.0]), []))
    assert "first_step_warmup" not in codes(sg.suggest(report(steps=[5.9, 2.0, 2.0, 2.0]), []))
    assert "first_step_warmup" in codes(sg.suggest(report(steps=[3.0, 1.0, 1.0]), []))  # three steps suffice
    assert codes(sg.suggest(report(steps=[3.0, 1.0]), [])) == []
    assert codes(sg.suggest(report(steps=[3.0, 0.0, 0.0]), [])) == []  # a median of 0: no ratio
    assert codes(sg.suggest(report(steps=[1.0, 0.0, 0.0, 0.0]), [])) == []  # a mean of 0: no ratio
    assert "first_step_warmup" in codes(sg.suggest(report(steps=[3.0, "x", 1.0, None, 1.0]), []))


def test_step_time_jitter_beyond_half_the_mean():
    # after the first: 1, 1, 4 -> mean 2, pstdev sqrt(2) = 71 % of the mean
    found = by_code(sg.suggest(report(steps=[1.0, 1.0, 1.0, 4.0]), []), "step_time_jitter")
    assert found.level == "info"
    assert found.message == "denoising step times vary by 71 % of their mean: other load on the machine"
    # after the first: 1.5, 0.5, 1.5, 0.5 -> a pstdev of exactly half the mean: not beyond it
    assert "step_time_jitter" not in codes(sg.suggest(report(steps=[1.0, 1.5, 0.5, 1.5, 0.5]), []))
    sixty = by_code(sg.suggest(report(steps=[1.0, 1.6, 0.4, 1.6, 0.4]), []), "step_time_jitter")
    assert sixty.message == "denoising step times vary by 60 % of their mean: other load on the machine"
    # the spread relative to the mean: 0.6 s around 2 s is 30 %
    assert "step_time_jitter" not in codes(sg.suggest(report(steps=[2.0, 2.6, 1.4, 2.6, 1.4]), []))
    assert "step_time_jitter" not in codes(
        sg.suggest(report(steps=[1.0, 1.0, 4.0]), [])
    )  # two after the first


def test_step_time_jitter_names_the_gpu_temperature_on_a_gpu_run():
    r = report(gpus=[("cuda:0", 0)], peaks={"cuda:0.temperature_c": 83.4}, steps=[1.0, 1.0, 1.0, 4.0])
    found = by_code(sg.suggest(r, []), "step_time_jitter")
    assert found.message.endswith(
        "other load on the machine or thermal throttling (GPU temperature peaked at 83 C)"
    )
    cool = report(gpus=[("cuda:0", 0)], steps=[1.0, 1.0, 1.0, 4.0])
    assert by_code(sg.suggest(cool, []), "step_time_jitter").message.endswith("other load on the machine")


def test_suggest_reads_the_reports_phases_when_none_are_given():
    r = report(duration=1.0)
    r["nodes"] = [{"node_id": "1", "class_type": "Big", "duration_s": 0.9, "status": "executed"}]
    assert codes(sg.suggest(r)) == ["dominant_stage"]
    assert sg.suggest(r)[0].message == "Big takes 90 % of the run: optimise there first"


def test_findings_come_gpu_then_host_then_timing():
    r = report(
        gpus=[("cuda:0", 10 * GiB)],
        peaks={"cuda:0.allocated_bytes": 10 * GiB, "ram_used_bytes": 10 * GiB},
        system={"ram_total_bytes": 10 * GiB},
        steps=[3.0, 1.0, 1.0],
    )
    assert codes(sg.suggest(r, [phase("x", n_errors=1)])) == [
        "gpu_memory_near_limit",
        "ram_near_limit",
        "stage_errors",
        "first_step_warmup",
    ]


@pytest.mark.parametrize("total", [None, 0])
def test_no_memory_rule_without_a_total(total):
    r = report(gpus=[("cuda:0", total)], peaks={"cuda:0.allocated_bytes": GiB, "ram_used_bytes": GiB})
    r["system"]["ram_total_bytes"] = total
    assert codes(sg.suggest(r, [phase("vae_decode", gpu=GiB)])) == []
