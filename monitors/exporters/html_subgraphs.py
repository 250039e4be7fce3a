"""The HTML report's subgraph section: one row per subgraph roll-up (monitors/engine/subgraphs.py),
nested ones indented under their parent, columns and labels from the declaration
(monitors/vocabulary/subgraph_fields.py). Every run string goes through html.escape."""

from __future__ import annotations

import html
from collections.abc import Mapping

from ..vocabulary.formatting import format_value
from ..vocabulary.subgraph_fields import SUBGRAPH_GPU_PEAK, SUBGRAPH_ROW

# (declared figure, reason shown as its tooltip when the figure is unknown)
COLUMNS = (
    ("wall_s", "wall_unknown_reason"),
    ("node_time_sum_s", None),
    ("n_cached", None),
    ("peak_rss_bytes", None),
    ("peak_rss_above_start_bytes", None),
)
GPU_COLUMN = "peak_allocated_bytes"


def _esc(value) -> str:
    return html.escape("" if value is None else str(value), quote=True)


def _field(name: str, group=SUBGRAPH_ROW):
    found = group.key(name)
    if found is None:
        raise KeyError(f"subgraph roll-ups declare no key {name!r}")
    return found


def _gpu_peak(subgraph: Mapping) -> int | None:
    peaks = [p.get(GPU_COLUMN) for p in subgraph.get(SUBGRAPH_GPU_PEAK.name) or () if isinstance(p, Mapping)]
    peaks = [p for p in peaks if isinstance(p, (int, float))]
    return max(peaks) if peaks else None


def _name_cell(subgraph: Mapping) -> str:
    depth = str(subgraph.get("id") or "").count(":")
    name = subgraph.get("name")
    shown = _esc(name) if name else f'<span class="muted" title="{_esc(subgraph.get("name_unknown_reason"))}">unnamed</span>'
    indent = "&nbsp;&nbsp;" * depth
    return f"<td>{indent}#{_esc(subgraph.get('id'))} {shown}</td>"


def subgraphs_html(report: Mapping) -> str:
    """The section (heading and table), or "" for a run without subgraphs."""
    subgraphs = [s for s in report.get("subgraphs") or () if isinstance(s, Mapping)]
    if not subgraphs:
        return ""
    fields = [_field(name) for name, _ in COLUMNS]
    gpu = _field(GPU_COLUMN, SUBGRAPH_GPU_PEAK)
    head = "".join(f'<th class=num title="{_esc(f.description)}">{_esc(f.label)}</th>' for f in fields)
    head = f"<tr><th>subgraph</th><th class=num>nodes</th>{head}<th class=num>{_esc(gpu.label)}</th></tr>"
    rows = []
    for s in subgraphs:
        cells = []
        for f, (name, reason) in zip(fields, COLUMNS, strict=True):
            value = s.get(name)
            tip = f' title="{_esc(s.get(reason))}"' if reason and value is None else ""
            cells.append(f"<td class=num{tip}>{_esc(format_value(f, value) if value is not None else '–')}</td>")
        peak = _gpu_peak(s)
        cells.append(f"<td class=num>{_esc(format_value(gpu, peak) if peak is not None else '–')}</td>")
        rows.append(f"<tr>{_name_cell(s)}<td class=num>{len(s.get('node_ids') or ())}</td>{''.join(cells)}</tr>")
    return f"<h2>Subgraphs</h2><table>{head}{''.join(rows)}</table>"
