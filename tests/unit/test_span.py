import json
import pathlib
import subprocess
import sys

import pytest

from monitors.engine.span import METHOD_KERNEL_HWM, METHOD_SAMPLED, Span, open_span_count
from monitors.probes.fake import GiB, fake_probes
from tests.unit.fake_clock import FakeClock, install

MiB = 1024**2


# The kernel's high-water mark is one per process: any thread of the test session that resets it
# (a ComfyUI executor thread left by an in-process test, whose pack copy has its own span
# registry) would erase the spike, so the spike runs in a fresh interpreter of its own.
SPIKE_SCRIPT = """
import json, time
import numpy as np
from monitors.probes import Probes
from monitors.probes.fake import fake_probes
from monitors.engine.span import Span
spike_bytes = 300 * 1024**2
probes = Probes(nvml=fake_probes().nvml)
with Span("spike", probes=probes) as span:
    before = probes.process_rss_bytes()
    block = np.ones(spike_bytes, dtype=np.uint8)  # touched, so resident
    time.sleep(0.05)
    del block
    after = probes.process_rss_bytes()
result = span.result
json.dump({"method": result.peak_rss_method, "peak": result.peak_rss_bytes, "before": before,
           "after": after, "spike": spike_bytes}, sys.stdout)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="exact peaks use Linux's VmHWM")
def test_short_300mb_spike_is_caught_within_2_percent():
    repo = pathlib.Path(__file__).resolve().parents[2]
    done = subprocess.run(
        [sys.executable, "-c", "import sys\n" + SPIKE_SCRIPT],
        cwd=repo,
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    r = json.loads(done.stdout)
    assert r["method"] == METHOD_KERNEL_HWM
    assert r["after"] < r["before"] + r["spike"] / 2, "the spike must be gone by the end of the span"
    measured = r["peak"] - r["before"]
    assert abs(measured - r["spike"]) / r["spike"] < 0.02, (measured, r["spike"])


def test_baseline_end_changes_and_duration(monkeypatch):
    clock = install(FakeClock(), monkeypatch)
    probes = fake_probes("no GPU")
    span = Span("work", probes=probes).start()
    probes.host.set_rss(1 * GiB)
    clock.advance(0.01)
    result = span.stop()
    change = result.changes["process_rss_bytes"]
    assert change.before == 512 * MiB and change.after == 1 * GiB
    assert change.delta == 512 * MiB and change.delta_pct == pytest.approx(100.0)
    assert result.duration_s == pytest.approx(0.01)
    assert result.baseline.process_rss_bytes == 512 * MiB and result.end.process_rss_bytes == 1 * GiB
    assert span.stop() is result  # idempotent


def test_peak_between_samples_comes_from_high_water_mark():
    probes = fake_probes("no GPU")
    with Span("s", probes=probes) as span:
        probes.host.set_rss(3 * GiB)  # spike never seen by a snapshot
        probes.host.set_rss(600 * MiB)
    peak = span.result.peaks["process_rss_bytes"]
    assert peak.value == 3 * GiB and peak.method == METHOD_KERNEL_HWM
    assert span.result.peak_rss_method == METHOD_KERNEL_HWM


def test_refused_reset_falls_back_to_sampling_and_says_so():
    probes = fake_probes("no clear_refs")
    span = Span("s", probes=probes).start()
    probes.host.set_rss(3 * GiB)
    span.observe(probes.snapshot())  # a sampler tick
    probes.host.set_rss(600 * MiB)
    result = span.stop()
    assert result.peak_rss_method == METHOD_SAMPLED
    assert result.peaks["process_rss_bytes"].value == 3 * GiB
    assert result.peaks["process_rss_bytes"].method == METHOD_SAMPLED


def test_peak_time_is_seconds_since_span_start(monkeypatch):
    clock = install(FakeClock(), monkeypatch)
    probes = fake_probes("no clear_refs")
    span = Span("s", probes=probes).start()
    clock.advance(0.05)
    probes.host.set_rss(2 * GiB)
    span.observe(probes.snapshot())
    probes.host.set_rss(1 * GiB)
    clock.advance(0.02)
    result = span.stop()
    assert result.peaks["process_rss_bytes"].at_s == pytest.approx(0.05)
    assert result.duration_s == pytest.approx(0.07)


def test_nested_spans_lose_no_peak():
    probes = fake_probes("1 GPU")
    outer = Span("prompt", probes=probes).start()
    probes.host.set_rss(4 * GiB)  # outer-only spike, before the inner span resets the counter
    probes.host.set_rss(1 * GiB)
    probes.torch.allocate(0, 2 * GiB)
    probes.torch.allocate(0, -2 * GiB)
    inner = Span("node", probes=probes).start()
    probes.host.set_rss(2 * GiB)
    probes.host.set_rss(1 * GiB)
    probes.torch.allocate(0, 1 * GiB)
    inner_result = inner.stop()
    outer_result = outer.stop()
    assert inner_result.peak_rss_bytes == 2 * GiB
    assert outer_result.peak_rss_bytes == 4 * GiB
    assert inner_result.peak("cuda:0.allocated_bytes") == 1 * GiB
    assert outer_result.peak("cuda:0.allocated_bytes") == 2 * GiB
    assert open_span_count() == 0


def test_inner_peak_reaches_outer_span():
    probes = fake_probes("no GPU")
    with Span("outer", probes=probes) as outer:
        with Span("inner", probes=probes):
            probes.host.set_rss(5 * GiB)
            probes.host.set_rss(1 * GiB)
    assert outer.result.peak_rss_bytes == 5 * GiB


def test_cuda_malloc_async_peaks_come_from_samples():
    probes = fake_probes("cudaMallocAsync")
    span = Span("s", probes=probes).start()
    probes.torch.allocate(0, 1 * GiB)
    span.observe(probes.snapshot())
    result = span.stop()
    peak = result.peaks["cuda:0.allocated_bytes"]
    assert peak.value == 1 * GiB and peak.method == METHOD_SAMPLED


def test_every_probe_failing_still_gives_a_result():
    probes = fake_probes("1 GPU")
    probes.host.fail.add("*")
    probes.torch.fail.add("*")
    with Span("s", probes=probes) as span:
        pass
    result = span.result
    assert result.peak_rss_bytes is None and result.duration_s >= 0
    assert result.changes["process_rss_bytes"].delta is None
    assert result.to_dict()["peak_rss_method"] == METHOD_SAMPLED


def test_span_closed_on_exception():
    probes = fake_probes()
    with pytest.raises(ValueError), Span("s", probes=probes) as span:
        raise ValueError("boom")
    assert span.result is not None and open_span_count() == 0
