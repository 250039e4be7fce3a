"""Fleet metrics in the Prometheus text exposition format (served by nodes/ as
`GET /pipeline_monitor/metrics`).

Fed from finished runs (a listener on the run store; runs still in memory when the exposition is
first asked for are counted then), plus gauges of the sampler's latest sample read at scrape time.
Everything lives in the pack's own CollectorRegistry, never prometheus-client's global one, so
the pack neither exposes nor collides with other packs' metrics. Per-worker identity comes from
Prometheus' `instance` label; see docs/metrics.md for a scrape config and a Grafana dashboard.
`runtime_getter()` gives anything with the sampler, recorder and store (nodes/runtime.py's Runtime).
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Mapping

try:  # a missing dependency must cost this route only, not every route of the pack
    from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
    from prometheus_client.core import GaugeMetricFamily
    from prometheus_client.exposition import choose_encoder
except ImportError as exc:  # pragma: no cover - installed with the pack's dependencies
    PROMETHEUS_MISSING = f"prometheus-client is not installed ({exc})"
else:
    PROMETHEUS_MISSING = None

from ..node_fields import node_gpu_peak
from ..probes import DETAIL_FULL
from ..vocabulary.registry import key
from .prometheus_models import ModelCounters

log = logging.getLogger(__name__)

PREFIX = "pipeline_monitor"
MAX_CLASS_LABELS = 500  # node classes beyond this are counted as "other" (bounded label sets)
MAX_SEEN_RUNS = 10_000
PROMPT_BUCKETS = (0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600)
NODE_BUCKETS = (0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)
MiB, GiB = 1024**2, 1024**3
BYTE_BUCKETS = (
    256 * MiB,
    512 * MiB,
    1 * GiB,
    2 * GiB,
    4 * GiB,
    8 * GiB,
    16 * GiB,
    24 * GiB,
    32 * GiB,
    48 * GiB,
    64 * GiB,
    96 * GiB,
    128 * GiB,
)
VAE_START = {"auto": "direct"}  # what each requested strategy tries first; anything later is a fallback
# Summary figures read from run reports, named through the vocabulary (a typo fails at import).
VAE_REQUESTED = key("vae_encode", "strategy_requested")
VAE_USED = key("vae_encode", "strategy_used")
VAE_N_OOM = key("vae_encode", "n_out_of_memory")
LORA_N_UNMATCHED = key("lora", "n_unmatched_keys")
# Metric names use the report's spelling of units (`_pct`, one name for CPU use everywhere).
SAMPLE_HOST = (
    ("process_rss_bytes", "process_rss_bytes", "Resident memory of the ComfyUI process"),
    ("ram_used_bytes", "ram_used_bytes", "System memory in use"),
    ("ram_available_bytes", "ram_available_bytes", "System memory available"),
    ("cpu_pct", "cpu_pct", "System CPU use in percent"),
)
SAMPLE_GPU = (
    ("gpu_allocated_bytes", "allocated_bytes", "Torch allocator: bytes allocated"),
    ("gpu_reserved_bytes", "reserved_bytes", "Torch allocator: bytes reserved"),
    ("gpu_used_bytes", "nvml_used_bytes", "NVML: device memory in use"),
    ("gpu_process_used_bytes", "process_used_bytes", "NVML: this process's device memory, outside torch too"),
    ("gpu_dynamic_vram_used_bytes", "aimdo_used_bytes", "comfy-aimdo: VRAM held by dynamic VRAM"),
    ("gpu_utilization_pct", "utilization_pct", "NVML: GPU utilisation in percent"),
    ("gpu_temperature_celsius", "temperature_c", "NVML: GPU temperature"),
    ("gpu_power_watts", "power_w", "NVML: GPU power draw"),
)


def _number(value) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def report_view(report) -> Mapping:
    """The few fields the metrics need, from a RunReport or its JSON dict (no deep copy of details)."""
    if isinstance(report, Mapping):
        return report
    return {
        "prompt_id": report.prompt_id,
        "status": report.status,
        "duration_s": report.duration_s,
        "span": report.span,
        "nodes": [n.to_dict() for n in report.nodes],
        "steps": [{"kind": s.kind, "summary": s.summary, "cached": s.cached} for s in report.steps],
        "model_residency": getattr(report, "model_residency", None),
        "complete": getattr(report, "complete", True),
    }


class SamplerCollector:
    """Gauges of the latest sampler tick (or a fresh reading when the sampler has none yet)."""

    def __init__(self, runtime_getter):
        self._runtime = runtime_getter

    def collect(self):
        runtime = self._runtime()
        points = runtime.sampler.points()
        snapshot = points[-1] if points else runtime.sampler.probes.snapshot(DETAIL_FULL)
        families = []
        timestamp = GaugeMetricFamily(f"{PREFIX}_sample_timestamp_seconds", "Unix time of the latest sample")
        timestamp.add_metric([], snapshot.unix_time_s)
        families.append(timestamp)
        for name, attr, help_text in SAMPLE_HOST:
            value = _number(getattr(snapshot, attr))
            if value is not None:
                family = GaugeMetricFamily(f"{PREFIX}_{name}", help_text + " (latest sample)")
                family.add_metric([], value)
                families.append(family)
        for name, attr, help_text in SAMPLE_GPU:
            family = GaugeMetricFamily(f"{PREFIX}_{name}", help_text + " (latest sample)", labels=["device"])
            for gpu in snapshot.gpus:
                value = _number(getattr(gpu, attr))
                if value is not None:
                    family.add_metric([gpu.device], value)
            if family.samples:
                families.append(family)
        running = GaugeMetricFamily(f"{PREFIX}_prompt_running", "1 while a prompt is executing")
        running.add_metric([], 1.0 if runtime.recorder.active_prompt_id else 0.0)
        families.append(running)
        return families


class FleetMetrics:
    def __init__(self, runtime_getter):
        self.registry = CollectorRegistry()
        r = self.registry
        self.prompt_duration = Histogram(
            f"{PREFIX}_prompt_duration_seconds",
            "Prompt wall time",
            ["status"],
            buckets=PROMPT_BUCKETS,
            registry=r,
        )
        self.node_duration = Histogram(
            f"{PREFIX}_node_duration_seconds",
            "Executed node wall time per node class",
            ["class_type"],
            buckets=NODE_BUCKETS,
            registry=r,
        )
        self.nodes_cached = Counter(
            f"{PREFIX}_nodes_cached", "Nodes served from the cache", ["class_type"], registry=r
        )
        self.prompt_peak_rss = Histogram(
            f"{PREFIX}_prompt_peak_rss_bytes", "Peak RSS of a prompt", buckets=BYTE_BUCKETS, registry=r
        )
        self.last_peak_rss = Gauge(
            f"{PREFIX}_last_prompt_peak_rss_bytes", "Peak RSS of the last prompt", registry=r
        )
        self.prompt_peak_gpu = Histogram(
            f"{PREFIX}_prompt_peak_gpu_allocated_bytes",
            "Highest torch allocation on any GPU during a prompt",
            buckets=BYTE_BUCKETS,
            registry=r,
        )
        self.last_peak_gpu = Gauge(
            f"{PREFIX}_last_prompt_peak_gpu_allocated_bytes",
            "GPU allocation peak of the last prompt",
            registry=r,
        )
        self.vae_encodes = Counter(
            f"{PREFIX}_vae_encode",
            "VAE encodes by requested and used strategy",
            ["requested", "used"],
            registry=r,
        )
        self.vae_fallbacks = Counter(
            f"{PREFIX}_vae_encode_fallbacks",
            "VAE encodes that fell back past their first strategy",
            ["used"],
            registry=r,
        )
        self.vae_oom = Counter(
            f"{PREFIX}_vae_encode_out_of_memory", "Out-of-memory attempts in VAE encodes", registry=r
        )
        self.lora_steps = Counter(f"{PREFIX}_lora_checks", "LoRA monitor steps", registry=r)
        self.lora_unmatched_steps = Counter(
            f"{PREFIX}_lora_checks_with_unmatched_keys",
            "LoRA monitor steps with unmatched file keys",
            registry=r,
        )
        self.lora_unmatched_keys = Counter(
            f"{PREFIX}_lora_unmatched_keys", "LoRA file keys that matched no model weight", registry=r
        )
        self.models = ModelCounters(Counter, PREFIX, r, self._class_label)  # model loads, unloads, bytes
        self.registry.register(SamplerCollector(runtime_getter))
        self._runtime = runtime_getter
        self._lock = threading.Lock()
        self._seen: OrderedDict[str, str] = OrderedDict()  # run id -> "pending" or "counted" (its steps)
        self._classes: set[str] = set()
        self._store = None

    # -- feeding -------------------------------------------------------------------------------
    def attach(self, store) -> None:
        """Listen to `store` and count the runs it already holds (once each)."""
        with self._lock:
            if self._store is store:
                return
            if self._store is not None:
                self._store.remove_listener(self.observe)
            self._store = store
        store.add_listener(self.observe)
        for summary in reversed(store.summaries()):  # oldest first
            data = store.get(summary["prompt_id"])
            if data is not None:
                self.observe(data)

    def _class_label(self, class_type) -> str:
        label = str(class_type or "unknown")
        if label in self._classes:
            return label
        if len(self._classes) >= MAX_CLASS_LABELS:
            return "other"
        self._classes.add(label)
        return label

    def observe(self, report) -> None:
        """Count one finished run (a RunReport or its dict); a run id already counted is skipped."""
        view = report_view(report)
        run_id = str(view.get("prompt_id"))
        with self._lock:
            if self._seen.get(run_id, "new") != "new":
                if self._seen[run_id] == "pending" and view.get("complete") is not False:
                    self._seen[run_id] = "counted"  # its pending steps finished: counted now
                    self._observe_steps(view)
                return
            self._seen[run_id] = "pending" if view.get("complete") is False else "counted"
            while len(self._seen) > MAX_SEEN_RUNS:
                self._seen.popitem(last=False)
            duration = _number(view.get("duration_s"))
            if duration is not None:
                self.prompt_duration.labels(status=str(view.get("status"))).observe(duration)
            gpu_peaks = []
            for node in view.get("nodes") or []:
                label = self._class_label(node.get("class_type"))
                if node.get("cached"):
                    self.nodes_cached.labels(class_type=label).inc()
                elif _number(node.get("duration_s")) is not None:
                    self.node_duration.labels(class_type=label).observe(node["duration_s"])
                gpu_peaks.append(_number(node_gpu_peak(node)))
            peak_rss = _number((view.get("span") or {}).get("peak_rss_bytes"))
            if peak_rss is not None:
                self.prompt_peak_rss.observe(peak_rss)
                self.last_peak_rss.set(peak_rss)
            gpu_peaks = [p for p in gpu_peaks if p is not None]
            if gpu_peaks:
                self.prompt_peak_gpu.observe(max(gpu_peaks))
                self.last_peak_gpu.set(max(gpu_peaks))
            self.models.observe(view)
            if view.get("complete") is not False:  # else when its pending steps finish
                self._observe_steps(view)

    def _observe_steps(self, view: Mapping) -> None:
        for step in view.get("steps") or []:
            if not step.get("cached"):  # a cached step repeats an earlier run's: counted then
                self._observe_step(step.get("kind"), step.get("summary") or {})

    def _observe_step(self, kind, summary: Mapping) -> None:
        if kind == "vae_encode":
            requested = str(summary.get(VAE_REQUESTED) or "unknown")
            used = str(summary.get(VAE_USED) or "none")
            self.vae_encodes.labels(requested=requested, used=used).inc()
            if summary.get(VAE_USED) and used != VAE_START.get(requested, requested):
                self.vae_fallbacks.labels(used=used).inc()
            ooms = _number(summary.get(VAE_N_OOM))
            if ooms:
                self.vae_oom.inc(ooms)
        elif kind == "lora":
            self.lora_steps.inc()
            unmatched = _number(summary.get(LORA_N_UNMATCHED))
            if unmatched:
                self.lora_unmatched_steps.inc()
                self.lora_unmatched_keys.inc(unmatched)

    def exposition(self, accept: str = "") -> tuple[bytes, str]:
        self.attach(self._runtime().store)
        encoder, content_type = choose_encoder(accept)
        return encoder(self.registry), content_type
