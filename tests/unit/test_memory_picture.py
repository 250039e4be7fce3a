"""The named memory picture of a span: baseline, end, change, peak (or low) with its time."""

from monitors.engine.span import Span, memory_picture
from monitors.probes import DETAIL_LIGHT
from monitors.probes.fake import GiB, fake_probes

MiB = 1024**2
FIGURE_KEYS = {"baseline", "end", "change", "change_pct", "peak", "peak_at_s"}


def test_full_span_has_every_figure_for_ram_rss_and_each_gpu():
    probes = fake_probes("2 GPUs")
    span = Span("step", probes=probes).start()
    probes.host.set_rss(900 * MiB)
    probes.host.ram_used_bytes = 6 * GiB
    probes.torch.allocate(0, 2 * GiB)
    probes.nvml.devices[1]["utilization_pct"] = 87.0
    span.observe(probes.snapshot())
    probes.host.set_rss(600 * MiB)
    probes.host.ram_used_bytes = 5 * GiB
    picture = memory_picture(span.stop())

    rss = picture["process_rss_bytes"]
    assert set(rss) == FIGURE_KEYS
    assert (rss["baseline"], rss["end"], rss["change"]) == (512 * MiB, 600 * MiB, 88 * MiB)
    assert rss["peak"] == 900 * MiB and rss["peak_at_s"] is not None

    ram = picture["system_ram"]
    assert ram["used_bytes"]["peak"] == 6 * GiB
    assert ram["used_bytes"]["change"] == 1 * GiB
    available = ram["available_bytes"]
    assert set(available) == {"baseline", "end", "change", "change_pct", "low", "low_at_s"}
    assert available["low"] == 10 * GiB and available["low_at_s"] is not None
    assert ram["used_pct"]["end"] is not None

    assert [g["device"] for g in picture["gpus"]] == ["cuda:0", "cuda:1"]
    gpu0, gpu1 = picture["gpus"]
    assert gpu0["allocated_bytes"]["peak"] >= 2 * GiB
    assert gpu0["allocated_bytes"]["change"] == 2 * GiB
    assert set(gpu0["reserved_bytes"]) == FIGURE_KEYS
    assert gpu0["nvml_used_bytes"]["baseline"] is not None
    assert gpu1["utilization_pct"]["peak"] == 87.0
    assert picture["unknown_reasons"] == {}


def test_light_span_says_why_system_ram_and_nvml_are_unknown():
    probes = fake_probes("1 GPU")
    with Span("node", probes=probes, detail=DETAIL_LIGHT) as span:
        pass
    picture = memory_picture(span.result)
    assert picture["system_ram"]["used_bytes"]["end"] is None
    assert "system_ram" in picture["unknown_reasons"]
    assert "gpu_nvml" in picture["unknown_reasons"]
    assert picture["gpus"][0]["allocated_bytes"]["end"] is not None


def test_no_gpu_picture_names_the_reason():
    with Span("cpu", probes=fake_probes()) as span:
        pass
    picture = memory_picture(span.result)
    assert picture["gpus"] == []
    assert "gpus" in picture["unknown_reasons"]
