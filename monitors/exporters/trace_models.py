"""A run's model events (`model_residency.events`: loads, unloads, LoRA patches) as a trace track
of their own: duration events where the model manager's call was timed, instants otherwise."""

from __future__ import annotations

from collections.abc import Mapping

US = 1_000_000.0
MODELS_TID = 1000  # after every node lane
MODELS_TRACK = "models"


def model_trace_events(report: Mapping, pid: int, offset_us: float) -> list[dict]:
    residency = report.get("model_residency")
    listed = residency.get("events") if isinstance(residency, Mapping) else None
    if not isinstance(listed, list) or not listed:
        return []
    events: list[dict] = [
        {"name": "thread_name", "ph": "M", "pid": pid, "tid": MODELS_TID, "args": {"name": MODELS_TRACK}}
    ]
    for event in listed:
        if not isinstance(event, Mapping) or not isinstance(event.get("offset_s"), (int, float)):
            continue
        ts = round(offset_us + event["offset_s"] * US, 3)
        out = {
            "name": f"{event.get('kind')} {event.get('model_class') or 'model'}",
            "cat": "model",
            "ts": ts,
            "pid": pid,
            "tid": MODELS_TID,
            "args": {
                key: event.get(key)
                for key in ("kind", "model_class", "bytes_moved", "device", "node_id", "n_weights", "reason")
            },
        }
        duration = event.get("duration_s")
        if isinstance(duration, (int, float)):
            out.update(ph="X", dur=round(duration * US, 3))
        else:
            out.update(ph="i", s="t")
        events.append(out)
    return events
