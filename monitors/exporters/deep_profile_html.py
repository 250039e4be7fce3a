"""The deep profile's tables in the HTML report (monitors/exporters/html.py adds them to the
step's card): per node, wall time against device time (bars) and host op time, GPU busy share,
syncs, then its top operations. Labels and descriptions come from summary.py's declaration."""

from __future__ import annotations

import html
from collections.abc import Mapping
from typing import Any

from ..deep_profile.summary import NODE_FIELDS, TOP_OP_FIELDS
from ..vocabulary.formatting import format_with_unit

_NODE = {f.name: f for f in NODE_FIELDS}
_OP = {f.name: f for f in TOP_OP_FIELDS}
NODE_COLUMNS = ("wall_s", "device_time_s", "host_op_time_s", "gpu_busy_pct", "n_syncs")
OP_COLUMNS = ("n_calls", "total_s", "share_pct")


def esc(value: Any) -> str:
    return html.escape("" if value is None else str(value), quote=True)


def _cell(fields, name: str, row: Mapping, reason_key: str | None = None) -> str:
    value = row.get(name)
    text = format_with_unit(fields[name].unit, value)
    reason = row.get(reason_key) if reason_key and value is None else None
    title = f' title="{esc(reason)}"' if reason else ""
    return f'<td class="num"{title}>{esc(text)}</td>'


def _bars(row: Mapping, longest_s: float) -> str:
    parts = []
    for name, css in (("wall_s", "bar"), ("device_time_s", "bar2")):
        value = row.get(name)
        if isinstance(value, (int, float)) and longest_s > 0:
            width = max(100.0 * value / longest_s, 0.5)
            parts.append(
                f'<div class="dbar" title="{esc(_NODE[name].label)}"><span class="{css}" style="width:{width:.1f}%"></span></div>'
            )
    return "".join(parts)


def _top_ops(row: Mapping) -> str:
    ops = [op for op in row.get("top_ops") or [] if isinstance(op, Mapping)]
    if not ops:
        return '<span class="muted">no ops</span>'
    head = "".join(
        f'<th class="num" title="{esc(_OP[c].description)}">{esc(_OP[c].label)}</th>' for c in OP_COLUMNS
    )
    body = "".join(
        f'<tr><td class="mono">{esc(op.get("name"))}</td>'
        + "".join(_cell(_OP, c, op) for c in OP_COLUMNS)
        + "</tr>"
        for op in ops
    )
    return f'<table class="dops"><thead><tr><th>{esc(_OP["name"].label)}</th>{head}</tr></thead><tbody>{body}</tbody></table>'


def deep_profile_html(step: Mapping) -> str:
    """The per-node tables of a `deep_profile` step; "" for any other step."""
    if step.get("kind") != "deep_profile":
        return ""
    details = step.get("details") if isinstance(step.get("details"), Mapping) else {}
    rows = [r for r in details.get("nodes") or [] if isinstance(r, Mapping)]
    reasons = details.get("unknown_reasons") if isinstance(details.get("unknown_reasons"), Mapping) else {}
    notes = "".join(f"<li>{esc(k)}: {esc(v)}</li>" for k, v in reasons.items())
    notes_html = f'<ul class="muted">{notes}</ul>' if notes else ""
    if not rows:
        return (
            f'<div class="deep"><h4>Per node</h4><p class="muted">No node was profiled.</p>{notes_html}</div>'
        )
    longest = max(
        (
            max(r.get("wall_s") or 0, r.get("device_time_s") or 0)
            for r in rows
            if isinstance(r.get("wall_s"), (int, float))
        ),
        default=0,
    )
    head = "".join(
        f'<th class="num" title="{esc(_NODE[c].description)}">{esc(_NODE[c].label)}</th>'
        for c in NODE_COLUMNS
    )
    reason_of = {
        "device_time_s": "device_time_unknown_reason",
        "gpu_busy_pct": "gpu_busy_unknown_reason",
        "n_syncs": "n_syncs_unknown_reason",
    }
    body = "".join(
        f"<tr><td>#{esc(r.get('node_id'))} {esc(r.get('class_type') or '')}{_bars(r, longest)}</td>"
        + "".join(_cell(_NODE, c, r, reason_of.get(c)) for c in NODE_COLUMNS)
        + f"<td>{_top_ops(r)}</td></tr>"
        for r in rows
    )
    by = esc(rows[0].get("top_ops_by") or "host")
    return (
        '<div class="deep"><h4>Per node <span class="muted">(bars: wall time, device time)</span></h4>'
        f'<table class="dnodes"><thead><tr><th>Node</th>{head}<th>Top ops (by {by} time)</th></tr></thead>'
        f"<tbody>{body}</tbody></table>{notes_html}</div>"
    )


STYLE = """
.deep h4 { font-size: 13px; margin: 8px 0 2px; } .dops { width: auto; font-size: 12px; }
.dbar { height: 4px; margin-top: 2px; background: var(--line); border-radius: 2px; position: relative; }
.dbar span { position: absolute; top: 0; bottom: 0; left: 0; border-radius: 2px; }
.dbar .bar { background: var(--bar); } .dbar .bar2 { background: var(--bar2); }
"""
