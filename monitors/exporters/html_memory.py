"""The memory section of a step in the HTML report (monitors.engine.span.memory_picture): a row per figure
of vocabulary.memory_rows.MEMORY_ROWS with start, end, change and peak @ time, and which nodes were measured.
"""

from __future__ import annotations

import html
from collections.abc import Mapping
from typing import Any

from ..vocabulary.formatting import format_bytes, format_seconds
from ..vocabulary.memory_rows import MEMORY_NOT_READ_REASON, MEMORY_ROWS


def esc(value: Any) -> str:
    return html.escape("" if value is None else str(value), quote=True)


def _memory_cells(fig: Any, reason: str) -> tuple[list[str], str]:
    """Start, end, change and peak (or low) @ time cells of one memory row, and a bar from the
    start to the peak (empty for a low point or an unknown)."""
    f = fig if isinstance(fig, Mapping) else {}
    low = "low" in f
    extreme, at_s = (f.get("low"), f.get("low_at_s")) if low else (f.get("peak"), f.get("peak_at_s"))
    na = f'<td class="num na" title="{esc(reason)}">n/a</td>'

    def number(value, text) -> str:
        return na if not isinstance(value, (int, float)) else f"<td class=num>{esc(text)}</td>"

    change = f.get("change")
    change_text = (
        "±0" if change == 0 else f"{'+' if isinstance(change, (int, float)) and change > 0 else ''}{format_bytes(change)}"
    )
    # the low point of available RAM says so: the column is headed "peak"
    when = f"{'low ' if low else ''}@ {format_seconds(at_s)}" if isinstance(at_s, (int, float)) else "low" if low else ""
    when = f'<br><span class="muted">{esc(when)}</span>' if when else ""
    top = (
        na
        if not isinstance(extreme, (int, float))
        else f'<td class=num title="{"lowest" if low else "highest"} during the step">{esc(format_bytes(extreme))}{when}</td>'
    )
    cells = [number(f.get("baseline"), format_bytes(f.get("baseline"))), number(f.get("end"), format_bytes(f.get("end"))),
             number(change, change_text), top]
    baseline = f.get("baseline")
    bar = ""
    if not low and isinstance(extreme, (int, float)) and extreme > 0 and isinstance(baseline, (int, float)):
        start_pct = max(0.0, min(100.0, 100 * baseline / extreme))
        bar = (
            f'<div class="mbar" title="start → peak"><span style="left:{start_pct:.0f}%;'
            f'width:{max(2.0, 100 - start_pct):.0f}%"></span></div>'
        )
    return cells, bar


def memory_scope_text(scope: Any, node_classes: Mapping[str, str] | None = None) -> str:
    """'measured: LoraLoader #10, #11 · not run (cached): #4' from a step's memory_scope."""
    scope = scope if isinstance(scope, Mapping) else {}
    node_classes = node_classes or {}

    def named(ids) -> str:
        by_class: dict[str, list[str]] = {}
        for node_id in ids:
            by_class.setdefault(node_classes.get(str(node_id)) or "", []).append(f"#{node_id}")
        return "; ".join(f"{cls + ' ' if cls else ''}{', '.join(listed)}" for cls, listed in by_class.items())

    parts = []
    if scope.get("measured_node_ids"):
        parts.append(f"measured: {named(scope['measured_node_ids'])}")
    if scope.get("not_run_node_ids"):
        parts.append(f"not run (cached): {named(scope['not_run_node_ids'])}")
    return " · ".join(parts)


def memory_html(details: Any, node_classes: Mapping[str, str] | None = None) -> str:
    """The step's memory section (monitors.engine.span.memory_picture), the panel's table: a row per
    figure of vocabulary.memory_rows.MEMORY_ROWS, columns start, end, change, peak @ time; '' without one."""
    if not isinstance(details, Mapping) or "memory" not in details:
        return ""
    scope = memory_scope_text(details.get("memory_scope"), node_classes)
    scope_html = f'<p class="muted mscope">{esc(scope)}</p>' if scope else ""
    picture = details.get("memory")
    if not isinstance(picture, Mapping):
        reason = details.get("memory_unknown_reason") or "not measured"
        return (
            f'<div class="memory"><h4>Memory</h4><p><span class="na" title="{esc(reason)}">n/a</span> '
            f'<span class="muted">{esc(reason)}</span></p>{scope_html}</div>'
        )
    reasons = picture.get("unknown_reasons") if isinstance(picture.get("unknown_reasons"), Mapping) else {}
    rows = []

    def add(decl: Mapping, fig: Any, row_label: str) -> None:
        reason = (decl["reason"] and reasons.get(decl["reason"])) or MEMORY_NOT_READ_REASON
        cells, bar = _memory_cells(fig, reason)
        rows.append(f'<tr><td title="{esc(decl["description"])}">{esc(row_label)}{bar}</td>{"".join(cells)}</tr>')

    ram = picture.get("system_ram") if isinstance(picture.get("system_ram"), Mapping) else {}
    for decl in MEMORY_ROWS:
        if decl["group"] is None:
            add(decl, picture.get(decl["field"]), decl["label"])
        elif decl["group"] == "system_ram":
            add(decl, ram.get(decl["field"]), decl["label"])
    for gpu in picture.get("gpus") or []:
        if isinstance(gpu, Mapping):
            for decl in (d for d in MEMORY_ROWS if d["group"] == "gpu"):
                add(decl, gpu.get(decl["field"]), f"{gpu.get('device') or 'GPU'} {decl['label']}")
    duration = picture.get("duration_s")
    title = f"Memory over {format_seconds(duration)}" if isinstance(duration, (int, float)) else "Memory"
    note = f'<p class="muted">GPU: {esc(reasons["gpus"])}</p>' if reasons.get("gpus") else ""
    return (
        f'<div class="memory"><h4>{esc(title)}</h4><table class="mtable"><thead><tr><th></th><th class=num>start</th>'
        '<th class=num>end</th><th class=num>change</th><th class=num title="the highest value during the step and '
        'when (from its start); for RAM available, the lowest">peak</th></tr></thead>'
        f"<tbody>{''.join(rows)}</tbody></table>{note}{scope_html}</div>"
    )
