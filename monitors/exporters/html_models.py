"""The HTML report's section on model weights (`model_residency`, monitors/engine/model_residency.py):
what the model manager loaded, unloaded and patched, when and for which node, and the models left
resident; labels from the declaration (monitors/engine/residency_fields.py)."""

from __future__ import annotations

import html
from collections.abc import Mapping

from ..engine.residency_fields import EVENT, MODEL_RESIDENCY, RESIDENT
from ..vocabulary.formatting import format_bytes, format_seconds

EVENT_COLUMNS = ("offset_s", "kind", "model_class", "node_id", "bytes_moved", "duration_s", "device", "reason")
SUMMARY_FIGURES = ("n_loads", "n_unloads", "weights_loaded_bytes", "weights_unloaded_bytes", "weights_moved_s")


def esc(value) -> str:
    return html.escape("–" if value is None else str(value), quote=True)


def _label(group, name: str) -> str:
    found = group.key(name)
    return found.label if found is not None else name


def _value(group, name: str, value) -> str:
    unit = getattr(group.key(name), "unit", None)
    if value is None:
        return "–"
    if unit == "bytes":
        return format_bytes(value)
    if unit == "s":
        return format_seconds(value)
    if unit == "pct":
        return f"{value:.1f} %"
    return str(value)


def _node(event: Mapping) -> str:
    node_id = event.get("node_id")
    return "–" if node_id is None else f"#{node_id} {event.get('node_class') or ''}".strip()


TITLE = "Model loads and unloads"


def model_residency_html(report: Mapping) -> str:
    """The section with its title; none for a report made before the model events were recorded."""
    residency = report.get("model_residency")
    if not isinstance(residency, Mapping):
        return ""
    figures = " · ".join(
        f"{esc(_label(MODEL_RESIDENCY, n))} {esc(_value(MODEL_RESIDENCY, n, residency.get(n)))}"
        for n in (*SUMMARY_FIGURES, "weights_moved_pct")
    )
    events = [e for e in residency.get("events") or () if isinstance(e, Mapping)]
    if not events:
        table = '<p class="muted">No model weights moved in this run.</p>'
    else:
        head = "".join(f"<th>{esc(_label(EVENT, c))}</th>" for c in EVENT_COLUMNS)
        rows = "".join(
            "<tr>"
            + "".join(
                f"<td>{esc(_node(e) if c == 'node_id' else _value(EVENT, c, e.get(c)))}</td>" for c in EVENT_COLUMNS
            )
            + "</tr>"
            for e in events
        )
        table = f'<table class="model-events"><tr>{head}</tr>{rows}</table>'
    resident = [m for m in residency.get("resident_at_end") or () if isinstance(m, Mapping)]
    kept = ", ".join(
        f"{m.get('model_class')} ({_value(RESIDENT, 'loaded_bytes', m.get('loaded_bytes'))} on {m.get('device')})"
        for m in resident
    )
    kept_html = f"<p>{esc(_label(MODEL_RESIDENCY, 'resident_at_end'))}: {esc(kept or 'none')}</p>"
    return f"<h2>{TITLE}</h2><p>{figures}</p>{table}{kept_html}"


def model_findings(report: Mapping) -> list[tuple[str, str, str]]:
    """(level, where, message) of the run's model findings, for the report's problem list."""
    residency = report.get("model_residency")
    listed = residency.get("findings") if isinstance(residency, Mapping) else None
    return [
        (str(f.get("level") or "info"), "models", str(f.get("message")))
        for f in listed or ()
        if isinstance(f, Mapping)
    ]
