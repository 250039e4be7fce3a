"""Spans: baseline and end snapshots, peaks with the time each was seen, changes, duration.

Peak RSS is exact on Linux: the span resets the kernel's RSS high-water mark (VmHWM) at start
and reads it at stop, so a short spike between two samples is not missed. Where the reset is
refused, the peak comes from the span's own readings and any sampler ticks (`peak_rss_method`
says which). Torch allocator peaks work the same way with `reset_peak_memory_stats`. Metrics whose
low point matters (available system memory) are kept as minima under `lows`, not as peaks.

Both counters are process-wide, so spans nest through one registry: before a span resets a
counter it hands the value so far to every span still open, and at stop it hands its reading
to them too. A node span inside a prompt span, or an attempt inside a node, loses no peak.

Spans that follow one another (ComfyUI's nodes) are `chained`: a chained span resets the counters
at its stop, after handing its reading over, so the next chained span counts its peaks from
there and reads them once, at its own stop, instead of reading and resetting them at its start
too (the kernel's high-water mark is the costliest read of a node's span). Its peaks then also
cover the moments between the previous chained span's stop and its start: for a node, ComfyUI
gathering its inputs. Any other span's start or stop breaks the chain: the next chained span
starts as a plain one.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field

from ..probes import DETAIL_FULL, Probes, Snapshot, get_probes
from ..probes.readings import LOW_POINT_METRICS

# A light span reads no system RAM or CPU: it has no change of them to report.
LIGHT_UNREAD_METRICS = frozenset({"ram_used_bytes", "ram_available_bytes", "ram_used_pct", "cpu_pct"})

METHOD_KERNEL_HWM = "kernel_hwm"
METHOD_ALLOCATOR_PEAK = "allocator_peak"
METHOD_SAMPLED = "sampled"

_open_spans: list[Span] = []
_registry_lock = threading.RLock()


class _Chain:
    """Where the counters stand for the next chained span (under _registry_lock)."""

    reset_at_stop = False  # last reset at a chained span's stop, no span started or stopped since
    exact_rss = False  # that reset of the high-water mark worked
    gpu_count = 0  # allocator peaks reset on that many devices
    probes: Probes | None = None  # whose counters (tests give spans their own fakes)


_chain = _Chain()


@dataclass(frozen=True)
class Peak:
    """The highest value of a metric in a span (or, under `lows`, the lowest)."""

    value: float | None
    at_s: float | None  # seconds since span start when the value was seen (for kernel_hwm: when it was read)
    method: str

    def to_dict(self) -> dict:
        return {"value": self.value, "at_s": self.at_s, "method": self.method}


@dataclass(frozen=True)
class Change:
    before: float | None
    after: float | None
    delta: float | None
    delta_pct: float | None

    @classmethod
    def between(cls, before, after) -> Change:
        if before is None or after is None:
            return cls(before, after, None, None)
        delta = after - before
        pct = (100.0 * delta / before) if before else None
        return cls(before, after, delta, pct)

    def to_dict(self) -> dict:
        return {"before": self.before, "after": self.after, "delta": self.delta, "delta_pct": self.delta_pct}


@dataclass(frozen=True)
class SpanResult:
    name: str
    start_unix_s: float
    duration_s: float
    baseline: Snapshot
    end: Snapshot
    peaks: Mapping[str, Peak] = field(default_factory=dict)
    changes: Mapping[str, Change] = field(default_factory=dict)
    peak_rss_method: str | None = None
    lows: Mapping[str, Peak] = field(default_factory=dict)  # minima of LOW_POINT_METRICS

    def above_start(self, metric: str) -> float | None:
        """How far the metric's peak rose above its value at the span's start (what the span added)."""
        peak = self.peak(metric)
        change = self.changes.get(metric)
        before = None if change is None else change.before
        return None if peak is None or before is None else peak - before

    @property
    def peak_rss_bytes(self) -> int | None:
        peak = self.peaks.get("process_rss_bytes")
        return None if peak is None or peak.value is None else int(peak.value)

    def peak(self, metric: str) -> float | None:
        peak = self.peaks.get(metric)
        return None if peak is None else peak.value

    def to_dict(self) -> dict:
        return {
            "name": self.name,
            "start_unix_s": self.start_unix_s,
            "duration_s": self.duration_s,
            "peak_rss_bytes": self.peak_rss_bytes,
            "peak_rss_method": self.peak_rss_method,
            "baseline": self.baseline.to_dict(),
            "end": self.end.to_dict(),
            "peaks": {k: v.to_dict() for k, v in self.peaks.items()},
            "lows": {k: v.to_dict() for k, v in self.lows.items()},
            "changes": {k: v.to_dict() for k, v in self.changes.items()},
        }


class Span:
    """Measure one stretch of work. Use as a context manager or with start()/stop()."""

    def __init__(
        self, name: str = "span", probes: Probes | None = None, detail: str = DETAIL_FULL, chained: bool = False
    ):
        self.name = name
        self.detail = detail
        self.chained = chained
        self._probes = probes
        self._peaks: dict[str, Peak] = {}
        self._lows: dict[str, Peak] = {}
        self._start_monotonic: float | None = None
        self._start_unix: float | None = None
        self._baseline: Snapshot | None = None
        self._baseline_metrics: dict = {}
        self._exact_rss = False
        self._gpu_count = 0
        self.result: SpanResult | None = None

    @property
    def probes(self) -> Probes:
        return self._probes if self._probes is not None else get_probes()

    @property
    def is_open(self) -> bool:
        return self._start_monotonic is not None and self.result is None

    # -- lifecycle ----------------------------------------------------------------------------
    def start(self) -> Span:
        if self._start_monotonic is not None:
            raise RuntimeError(f"span {self.name!r} already started")
        probes = self.probes
        with _registry_lock:
            self._start_monotonic = time.monotonic()
            self._start_unix = time.time()
            self._gpu_count = probes.torch_device_count()
            if (
                self.chained
                and _chain.reset_at_stop
                and _chain.probes is probes
                and _chain.gpu_count == self._gpu_count
            ):
                self._exact_rss = _chain.exact_rss  # the counters count from the last chained stop
            else:
                self._hand_counters_to_open_spans(probes)
                self._exact_rss = self._reset_counters(probes)
            _chain.reset_at_stop = False
            _open_spans.append(self)
        self._baseline = probes.snapshot(self.detail)
        self._baseline_metrics = self._baseline.metrics()
        self._observe_metrics(self._baseline_metrics, self._baseline.monotonic_s)
        return self

    def stop(self) -> SpanResult:
        if self.result is not None:
            return self.result
        if self._start_monotonic is None:
            raise RuntimeError(f"span {self.name!r} was never started")
        probes = self.probes
        end = probes.snapshot(self.detail)
        end_metrics = end.metrics()
        self._observe_metrics(end_metrics, end.monotonic_s)
        with _registry_lock:
            self._hand_counters_to_open_spans(probes)
            if self in _open_spans:
                _open_spans.remove(self)
            _chain.reset_at_stop = self.chained
            if self.chained:
                _chain.exact_rss = self._reset_counters(probes)
                _chain.gpu_count, _chain.probes = self._gpu_count, probes
        baseline_metrics = self._baseline_metrics
        unread = LIGHT_UNREAD_METRICS if self.detail != DETAIL_FULL else ()
        changes = {
            name: Change.between(baseline_metrics.get(name), end_metrics.get(name))
            for name in dict.fromkeys([*baseline_metrics, *end_metrics])
            if name not in unread
        }
        self.result = SpanResult(
            name=self.name,
            start_unix_s=self._start_unix,
            duration_s=end.monotonic_s - self._start_monotonic,
            baseline=self._baseline,
            end=end,
            peaks=dict(self._peaks),
            changes=changes,
            peak_rss_method=METHOD_KERNEL_HWM if self._exact_rss else METHOD_SAMPLED,
            lows=dict(self._lows),
        )
        return self.result

    def __enter__(self) -> Span:
        return self.start()

    def __exit__(self, *exc_info) -> None:
        self.stop()

    # -- peaks --------------------------------------------------------------------------------
    def observe(self, snapshot: Snapshot) -> None:
        """Take a snapshot's values as peak candidates (the sampler calls this while the span is open)."""
        self._observe_metrics(snapshot.metrics(), snapshot.monotonic_s)

    def _observe_metrics(self, metrics: Mapping, at_monotonic: float) -> None:
        with _registry_lock:
            for metric, value in metrics.items():
                self._offer(metric, value, at_monotonic, METHOD_SAMPLED)

    def _offer(self, metric: str, value, at_monotonic: float, method: str) -> None:
        if value is None or self._start_monotonic is None:
            return
        low = metric in LOW_POINT_METRICS
        kept = self._lows if low else self._peaks
        best = kept.get(metric)
        if best is None or best.value is None or (value < best.value if low else value > best.value):
            at_s = max(0.0, at_monotonic - self._start_monotonic)
            kept[metric] = Peak(value, at_s, method)

    def _reset_counters(self, probes: Probes) -> bool:
        """Reset the high-water mark and the allocator peaks; whether the first worked."""
        exact_rss = probes.reset_peak_rss()
        for index in range(self._gpu_count):
            probes.reset_torch_peak(index)
        return exact_rss

    def _hand_counters_to_open_spans(self, probes: Probes) -> None:
        """Read the process-wide peak counters and offer them to every open span.

        Called before self joins the registry at start (so only enclosing spans receive) and
        before it leaves at stop (so self and its enclosing spans receive)."""
        now = time.monotonic()
        receivers = [span for span in _open_spans if span._exact_rss]
        if receivers:
            hwm = probes.peak_rss_bytes()
            for span in receivers:
                span._offer("process_rss_bytes", hwm, now, METHOD_KERNEL_HWM)
        if not _open_spans:
            return
        for index in range(self._gpu_count):
            memory = probes.torch_memory(index) or {}
            for counter in ("allocated_bytes", "reserved_bytes"):
                value = memory.get(f"peak_{counter}")
                for span in _open_spans:
                    span._offer(f"cuda:{index}.{counter}", value, now, METHOD_ALLOCATOR_PEAK)


# The named groups of the memory picture: metric name in a snapshot -> name in the picture.
_PICTURE_RAM = (
    ("ram_used_bytes", "used_bytes"),
    ("ram_available_bytes", "available_bytes"),
    ("ram_used_pct", "used_pct"),
)
_PICTURE_GPU = ("allocated_bytes", "reserved_bytes", "nvml_used_bytes", "utilization_pct")


def _figure(result: SpanResult, metric: str) -> dict:
    """baseline, end, change and extreme with when it was reached: the peak, or for the metrics
    whose low point matters (available RAM) the low."""
    change = result.changes.get(metric)
    low = metric in LOW_POINT_METRICS
    extreme = (result.lows if low else result.peaks).get(metric)
    key = "low" if low else "peak"
    return {
        "baseline": None if change is None else change.before,
        "end": None if change is None else change.after,
        "change": None if change is None else change.delta,
        "change_pct": None if change is None else change.delta_pct,
        key: None if extreme is None else extreme.value,
        f"{key}_at_s": None if extreme is None else extreme.at_s,
    }


def memory_picture(result: SpanResult) -> dict:
    """The complete, named memory set of one span, the same for every monitor step that has one.

    System RAM (used, available with its low point, percent), process RSS, and per GPU the torch
    allocator's allocated and reserved, NVML's used memory and the utilisation seen during the
    span. A figure the span's detail level did not read (a light span reads no system RAM or
    NVML) is None with the reason in `unknown_reasons`."""
    ram = {name: _figure(result, metric) for metric, name in _PICTURE_RAM}
    devices = sorted({m.split(".")[0] for m in result.changes if m.startswith("cuda:")}, key=_device_index)
    gpus = [
        {"device": device, **{name: _figure(result, f"{device}.{name}") for name in _PICTURE_GPU}}
        for device in devices
    ]
    reasons = {}
    if all(v["baseline"] is None and v["end"] is None for v in ram.values()):
        reasons["system_ram"] = "not read by this span (light detail) or the host probe failed"
    if gpus and all(g["nvml_used_bytes"]["end"] is None for g in gpus):
        reasons["gpu_nvml"] = "NVML not read by this span (light detail) or not available"
    if not gpus:
        reasons["gpus"] = "no GPU seen by torch or NVML"
    return {
        "duration_s": result.duration_s,
        "start_unix_s": result.start_unix_s,
        "peak_rss_method": result.peak_rss_method,
        "system_ram": ram,
        "process_rss_bytes": _figure(result, "process_rss_bytes"),
        "gpus": gpus,
        "unknown_reasons": reasons,
    }


def merge_sequential(name: str, results) -> SpanResult | None:
    """One result for spans that ran one after another (a monitor's upstream nodes): baseline of
    the first, end of the last, each peak and low the extreme over all of them with its time
    counted from the first one's start. What ran between them (other nodes) moves the end value
    but its own peaks are not seen: only the merged spans were measured. None for no spans."""
    ordered = sorted((r for r in results if r is not None), key=lambda r: r.start_unix_s)
    if not ordered:
        return None
    first, last = ordered[0], ordered[-1]
    peaks: dict[str, Peak] = {}
    lows: dict[str, Peak] = {}
    for result in ordered:
        offset_s = max(0.0, result.start_unix_s - first.start_unix_s)
        for source, kept, low in ((result.peaks, peaks, False), (result.lows, lows, True)):
            for metric, extreme in source.items():
                if extreme.value is None:
                    continue
                best = kept.get(metric)
                if (
                    best is None
                    or best.value is None
                    or (extreme.value < best.value if low else extreme.value > best.value)
                ):
                    at_s = None if extreme.at_s is None else extreme.at_s + offset_s
                    kept[metric] = Peak(extreme.value, at_s, extreme.method)
    baseline_metrics = first.baseline.metrics()
    end_metrics = last.end.metrics()
    changes = {
        metric: Change.between(baseline_metrics.get(metric), end_metrics.get(metric))
        for metric in dict.fromkeys([*baseline_metrics, *end_metrics])
    }
    exact = all(r.peak_rss_method == METHOD_KERNEL_HWM for r in ordered)
    return SpanResult(
        name=name,
        start_unix_s=first.start_unix_s,
        duration_s=max(0.0, last.start_unix_s - first.start_unix_s) + last.duration_s,
        baseline=first.baseline,
        end=last.end,
        peaks=peaks,
        changes=changes,
        peak_rss_method=METHOD_KERNEL_HWM if exact else METHOD_SAMPLED,
        lows=lows,
    )


def _device_index(device: str) -> int:
    try:
        return int(device.split(":")[1])
    except (IndexError, ValueError):
        return 0


def observe_open_spans(snapshot: Snapshot) -> None:
    """Offer a sampler tick to every open span."""
    with _registry_lock:
        spans = list(_open_spans)
    for span in spans:
        span.observe(snapshot)


def open_span_count() -> int:
    with _registry_lock:
        return len(_open_spans)
