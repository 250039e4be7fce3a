"""Prometheus counters of the model manager's work, by model class, from a run's
`model_residency.events` (monitors/engine/model_residency.py): loads, unloads and the bytes of
weights moved. Fed by monitors/exporters/prometheus.py's FleetMetrics with each finished run."""

from __future__ import annotations

from collections.abc import Callable, Mapping

LOAD_PREFIX = "load_"
UNLOAD_PREFIX = "unload_"


class ModelCounters:
    def __init__(self, counter_class, prefix: str, registry, class_label: Callable[[object], str]):
        self.loads = counter_class(
            f"{prefix}_model_loads", "Loads of model weights by the model manager", ["model_class"], registry=registry
        )
        self.unloads = counter_class(
            f"{prefix}_model_unloads",
            "Full and partial unloads of model weights by the model manager",
            ["model_class"],
            registry=registry,
        )
        self.moved = counter_class(
            f"{prefix}_weights_moved_bytes",
            "Bytes of model weights loaded or unloaded (ComfyUI's loaded_size() before and after)",
            ["model_class"],
            registry=registry,
        )
        self._label = class_label

    def observe(self, report: Mapping) -> None:
        residency = report.get("model_residency")
        events = residency.get("events") if isinstance(residency, Mapping) else None
        for event in events if isinstance(events, list) else ():
            if not isinstance(event, Mapping):
                continue
            kind = str(event.get("kind") or "")
            label = self._label(event.get("model_class"))
            if kind.startswith(LOAD_PREFIX):
                self.loads.labels(model_class=label).inc()
            elif kind.startswith(UNLOAD_PREFIX):
                self.unloads.labels(model_class=label).inc()
            else:
                continue
            moved = event.get("bytes_moved")
            if isinstance(moved, (int, float)) and not isinstance(moved, bool) and moved > 0:
                self.moved.labels(model_class=label).inc(moved)
