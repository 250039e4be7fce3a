"""A run report (the JSON dict of schemas/run_report.schema.json) as one self-contained HTML page.

Inline SVG charts (timeline of the nodes on a time axis, per-node time and peak RSS), problems and
suggestions first, a section per monitor step (its memory table: html_memory.py), the per-node table
and the system info. No script, no external request: the page opens offline. Every string that comes
from the run (prompt ids, titles, class names, file names, messages, any summary or detail value)
goes through html.escape.
"""

from __future__ import annotations

import datetime
import html
import json
from collections.abc import Mapping
from typing import Any

from ..node_fields import GPU_BUSY_CAVEAT, GPU_TIME_CAVEAT, node_gpu_peak
from ..vocabulary import formatting, registry
from ..vocabulary.formatting import format_bytes, format_seconds
from ..vocabulary.memory_rows import NODE_GPU_FIGURES
from ..vocabulary.upgrade import upgrade_report
from .deep_profile_html import STYLE as DEEP_PROFILE_STYLE
from .deep_profile_html import deep_profile_html
from .html_memory import memory_html, memory_scope_text  # noqa: F401 (memory_scope_text is imported from here)
from .html_models import model_findings, model_residency_html
from .html_subgraphs import subgraphs_html

CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:; base-uri 'none'; form-action 'none'"
MAX_TIMELINE_ROWS = 200
MAX_DETAILS_CHARS = 200_000
ROW_H, LABEL_W, CHART_W = 18, 220, 560

STYLE = """
:root { color-scheme: light dark; --fg:#1d1f24; --bg:#fff; --muted:#5b6270; --line:#d5d9e0;
  --card:#f5f6f8; --bar:#3b82f6; --bar2:#a855f7; --err:#c62828; --warn:#b26a00; --ok:#2e7d32; }
@media (prefers-color-scheme: dark) { :root { --fg:#e4e6eb; --bg:#17181c; --muted:#9aa1ad;
  --line:#353842; --card:#202228; --bar:#60a5fa; --bar2:#c084fc; --err:#ef5350; --warn:#ffb74d;
  --ok:#66bb6a; } }
body { font: 14px/1.45 system-ui, sans-serif; color: var(--fg); background: var(--bg);
  margin: 24px auto; max-width: 1000px; padding: 0 16px; }
h1 { font-size: 20px; margin: 0 0 4px; } h2 { font-size: 16px; margin: 28px 0 8px;
  border-bottom: 1px solid var(--line); padding-bottom: 4px; } h3 { font-size: 14px; margin: 0 0 6px; }
.muted { color: var(--muted); } .mono { font-family: ui-monospace, monospace; }
table { border-collapse: collapse; width: 100%; font-size: 13px; }
th, td { text-align: left; padding: 3px 8px; border-bottom: 1px solid var(--line); vertical-align: top; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
.card { background: var(--card); border: 1px solid var(--line); border-radius: 6px; padding: 10px 12px;
  margin: 10px 0; }
.badge { display: inline-block; padding: 0 6px; border-radius: 8px; font-size: 12px;
  border: 1px solid var(--line); margin-left: 6px; }
.error { color: var(--err); } .warning { color: var(--warn); } .info { color: var(--muted); }
.success { color: var(--ok); }
.figures { display: grid; grid-template-columns: repeat(auto-fill, minmax(170px, 1fr)); gap: 4px 16px; }
.figures div { overflow-wrap: break-word; min-width: 0; } .figures b { display: block; font-size: 12px;
  color: var(--muted); font-weight: normal; }
pre { white-space: pre-wrap; overflow-wrap: anywhere; font-size: 12px; margin: 6px 0 0; }
svg text { fill: var(--fg); font: 11px system-ui, sans-serif; } svg .axis { stroke: var(--line); }
.memory h4 { font-size: 13px; margin: 8px 0 2px; } .mtable { width: auto; min-width: 60%; }
.na { color: var(--muted); cursor: help; } .mscope { margin: 2px 0; font-size: 12px; }
.mbar { position: relative; height: 3px; margin-top: 2px; background: var(--line); border-radius: 2px; }
.mbar span { position: absolute; top: 0; bottom: 0; background: var(--bar2); border-radius: 2px; }
svg .bar { fill: var(--bar); } svg .bar2 { fill: var(--bar2); } svg .errbar { fill: var(--err); }
"""


def esc(value: Any) -> str:
    return html.escape("" if value is None else str(value), quote=True)


def format_value(key: str, value: Any) -> str:
    """A value that no step kind declares (node rows, system info), by the unit its name implies."""
    return formatting.format_value(key, value)


def label(kind: str | None, key: str) -> str:
    """A summary key's label: the kind's declaration, else derived from the name."""
    return registry.label(kind, key)


def _verdict_key() -> str:
    # looked up when a report renders: the vocabulary's registry imports this module's neighbours
    return registry.key("tensor_compare", "verdict")


def _utc(unix_s: float | None) -> str:
    if unix_s is None:
        return "–"
    return datetime.datetime.fromtimestamp(unix_s, datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def node_label(node: Mapping) -> str:
    return f"#{node.get('node_id')} {node.get('title') or node.get('class_type') or ''}".strip()


# -- charts ----------------------------------------------------------------------------------------


def _axis(total: float, x0: int, width: int, y: int) -> list[str]:
    parts = [f'<line class="axis" x1="{x0}" y1="{y}" x2="{x0 + width}" y2="{y}"/>']
    for i in range(5):
        value = total * i / 4
        x = x0 + width * i / 4
        parts.append(f'<line class="axis" x1="{x:.1f}" y1="{y}" x2="{x:.1f}" y2="{y + 4}"/>')
        # the last label ends at the axis' end, so its unit is not cut off by the picture's edge
        anchor = "end" if i == 4 else "start" if i == 0 else "middle"
        parts.append(
            f'<text x="{x:.1f}" y="{y + 15}" text-anchor="{anchor}">{esc(format_seconds(value))}</text>'
        )
    return parts


def timeline_svg(report: Mapping) -> str:
    """One bar per executed node at its start offset, on the run's time axis."""
    nodes = [n for n in report.get("nodes") or [] if n.get("start_offset_s") is not None]
    nodes = sorted(nodes, key=lambda n: n["start_offset_s"])[:MAX_TIMELINE_ROWS]
    if not nodes:
        return '<p class="muted">No timed nodes (all cached, or the per-node profile was off).</p>'
    end = max(n["start_offset_s"] + (n.get("duration_s") or 0) for n in nodes)
    total = max(report.get("duration_s") or 0, end, 1e-3)
    height = len(nodes) * ROW_H + 24
    parts = [f'<svg role="img" aria-label="timeline" width="{LABEL_W + CHART_W + 10}" height="{height}">']
    for i, node in enumerate(nodes):
        y = i * ROW_H
        x = LABEL_W + CHART_W * node["start_offset_s"] / total
        w = max(CHART_W * (node.get("duration_s") or 0) / total, 1.5)
        css = "errbar" if node.get("status") in ("error", "interrupted") else "bar"
        tip = f"{node_label(node)}: {format_seconds(node.get('duration_s'))} from {format_seconds(node['start_offset_s'])}"
        parts.append(
            f'<text x="{LABEL_W - 6}" y="{y + 13}" text-anchor="end">{esc(_clip(node_label(node), 34))}</text>'
        )
        parts.append(
            f'<rect class="{css}" x="{x:.1f}" y="{y + 3}" width="{w:.1f}" height="{ROW_H - 6}">'
            f"<title>{esc(tip)}</title></rect>"
        )
    parts += _axis(total, LABEL_W, CHART_W, len(nodes) * ROW_H + 2)
    parts.append("</svg>")
    return "".join(parts)


def breakdown_svg(report: Mapping, key: str, css: str, fmt) -> str:
    """Horizontal bars of one per-node figure, largest first."""
    rows = [n for n in report.get("nodes") or [] if isinstance(n.get(key), (int, float))]
    rows = sorted(rows, key=lambda n: n[key], reverse=True)[:40]
    if not rows:
        return '<p class="muted">No values.</p>'
    top = max(n[key] for n in rows) or 1
    parts = [
        f'<svg role="img" aria-label="{esc(key)}" width="{LABEL_W + CHART_W + 90}" height="{len(rows) * ROW_H + 4}">'
    ]
    for i, node in enumerate(rows):
        y = i * ROW_H
        w = max(CHART_W * node[key] / top, 1.5)
        parts.append(
            f'<text x="{LABEL_W - 6}" y="{y + 13}" text-anchor="end">{esc(_clip(node_label(node), 34))}</text>'
        )
        parts.append(f'<rect class="{css}" x="{LABEL_W}" y="{y + 3}" width="{w:.1f}" height="{ROW_H - 6}"/>')
        parts.append(f'<text x="{LABEL_W + w + 6:.1f}" y="{y + 13}">{esc(fmt(node[key]))}</text>')
    parts.append("</svg>")
    return "".join(parts)


def _clip(text: str, n: int) -> str:
    return text if len(text) <= n else text[: n - 1] + "…"


# -- sections --------------------------------------------------------------------------------------


def problems_html(report: Mapping) -> str:
    items = []
    error = report.get("error")
    if error:
        text = f"Node {error.get('node_id')} ({error.get('node_type') or '?'}): {error.get('exception_type')}"
        if error.get("exception_message"):
            text += f": {error['exception_message']}"
        items.append(("error", "run", text))
    order = {"error": 0, "warning": 1, "info": 2}
    findings = []
    for step in report.get("steps") or []:
        where = f"{step.get('kind')} #{step.get('node_id')}"
        verdict = (step.get("summary") or {}).get(_verdict_key()) if step.get("kind") == "tensor_compare" else None
        for finding in step.get("findings") or []:
            level = finding.get("level") or "info"
            if level == "info" and verdict is not None and finding.get("message") == verdict:
                continue  # a close or identical verdict is said once, in its step's card
            findings.append((level, where, finding.get("message")))
        for problem in step.get("monitor_errors") or []:
            findings.append(("warning", where, f"monitoring: {problem}"))
    findings += model_findings(report)
    for problem in report.get("monitor_errors") or []:
        findings.append(("info", "monitor", problem))
    if report.get("missing_seams"):
        seams = ", ".join(str(seam) for seam in report["missing_seams"])
        findings.append(("warning", "monitor", f"ComfyUI seams not found: {seams}; the figures that read them are missing from this run"))
    items += sorted(findings, key=lambda f: order.get(f[0], 3))
    if not items:
        return '<p class="muted">No errors or suggestions.</p>'
    rows = "".join(
        f'<li class="{esc(level)}"><b>{esc(level)}</b> <span class="muted">[{esc(where)}]</span> {esc(message)}</li>'
        for level, where, message in items
    )
    return f"<ul>{rows}</ul>"


def nodes_table(report: Mapping) -> str:
    nodes = report.get("nodes") or []
    if not nodes:
        return '<p class="muted">No nodes profiled.</p>'
    head = (
        "<tr><th>node</th><th>class</th><th>status</th><th class=num>start</th><th class=num>time</th>"
        f'<th class=num title="{esc(GPU_TIME_CAVEAT)}">GPU span</th>'
        f'<th class=num title="{esc(GPU_BUSY_CAVEAT)}">GPU busy</th>'
        "<th class=num>peak RSS</th><th class=num>RSS added</th><th class=num>RSS change</th>"
        "<th class=num>peak GPU</th><th class=num>GPU added</th>"
    )
    moved = any(n.get("weights_moved_s") is not None for n in nodes)  # the model manager's work
    head += "<th class=num>weights moved</th>" if moved else ""
    device = _device_memory_columns(nodes)
    head += "".join(
        f'<th class=num title="{esc(NODE_GPU_FIGURES[name]["description"])}">{esc(NODE_GPU_FIGURES[name]["label"])}</th>'
        for name in device
    )
    head += "</tr>"
    rows = []
    for n in nodes:
        rows.append(
            f"<tr><td>#{esc(n.get('node_id'))} {esc(n.get('title') or '')}</td><td class=mono>{esc(n.get('class_type'))}</td>"
            f"<td>{esc(n.get('status'))}</td><td class=num>{esc(format_seconds(n.get('start_offset_s')))}</td>"
            f"<td class=num>{esc(format_seconds(n.get('duration_s')))}</td>"
            f"<td class=num title=\"{esc(n.get('gpu_time_unknown_reason') or '')}\">"
            f"{esc(format_seconds(n['gpu_time_s']) if n.get('gpu_time_s') is not None else '–')}</td>"
            f"<td class=num title=\"{esc(n.get('gpu_busy_unknown_reason') or '')}\">"
            f"{esc(format_seconds(n['gpu_busy_s']) if n.get('gpu_busy_s') is not None else '–')}</td>"
            f"<td class=num>{esc(format_bytes(n.get('peak_rss_bytes')) if n.get('peak_rss_bytes') is not None else '–')}</td>"
            f"<td class=num>{esc(format_value('peak_bytes', n.get('peak_rss_above_start_bytes')))}</td>"
            f"<td class=num>{esc(format_value('rss_change_bytes', n.get('rss_change_bytes')))}</td>"
            f"<td class=num>{esc(format_value('peak_bytes', node_gpu_peak(n)))}</td>"
            f"<td class=num>{esc(format_value('peak_bytes', node_gpu_peak(n, 'peak_allocated_above_start_bytes')))}</td>"
            + (f"<td class=num>{esc(_weights_moved(n))}</td>" if moved else "")
            + "".join(_device_memory_cell(n, name) for name in device)
            + "</tr>"
        )
    caveat = (
        f'<p class="muted">{esc(GPU_TIME_CAVEAT)} {esc(GPU_BUSY_CAVEAT)}</p>'
        if any(n.get("gpu_time_s") is not None or n.get("gpu_busy_s") is not None for n in nodes)
        else ""
    )
    return f"<table>{head}{''.join(rows)}</table>{caveat}"


def step_html(step: Mapping, node_classes: Mapping[str, str] | None = None) -> str:
    summary = step.get("summary") or {}
    kind = step.get("kind")
    kind_name = kind if isinstance(kind, str) else None
    badges = "".join(f'<span class="badge">{b}</span>' for b in ("cached", "pending") if step.get(b))
    vocab = registry.vocabulary(kind_name) if kind_name else None
    title = vocab.title if vocab else str(kind or "step").replace("_", " ")
    # a compare's verdict is one of its figures; its finding would say the same a second time
    verdict = summary.get(_verdict_key()) if kind_name == "tensor_compare" else None
    figures = "".join(
        f"<div><b>{esc(label(kind_name, str(k)))}</b>"
        f"{esc(registry.format_summary_value(kind_name, str(k), summary[k]))}</div>"
        for k in registry.ordered_keys(kind_name, summary)
    )
    findings = "".join(
        f'<li class="{esc(f.get("level"))}"><b>{esc(f.get("level"))}</b> {esc(f.get("message"))}</li>'
        for f in step.get("findings") or []
        if verdict is None or f.get("message") != verdict
    )
    findings += "".join(
        f'<li class="warning">monitoring: {esc(m)}</li>'
        for m in [*(step.get("monitor_errors") or []), *([step["unfinished_reason"]] if step.get("unfinished_reason") else [])]
    )
    # UTF-8 text as text (a Japanese prompt reads as itself, not as \\u65e5...)
    details = json.dumps(step.get("details") or {}, indent=1, default=str, ensure_ascii=False)
    if len(details) > MAX_DETAILS_CHARS:
        details = details[:MAX_DETAILS_CHARS] + "\n… (cut)"
    return (
        f'<section class="card" data-kind="{esc(kind)}"><h3>{esc(title)} <span class="muted">node #{esc(step.get("node_id"))}</span>{badges}</h3>'
        + (f"<ul>{findings}</ul>" if findings else "")
        + (f'<div class="figures">{figures}</div>' if figures else "")
        + memory_html(step.get("details"), node_classes)
        + deep_profile_html(step)
        + f"<details><summary>details</summary><pre>{esc(details)}</pre></details></section>"
    )


def system_html(system: Mapping) -> str:
    if not system:
        return '<p class="muted">No system information.</p>'
    rows = "".join(
        f"<tr><th title=\"{esc(key)}\">{esc(label(None, str(key)))}</th><td>{esc(format_value(str(key), value))}</td></tr>"
        for key, value in system.items()
    )
    return f"<table>{rows}</table>"


def input_changes_html(report: Mapping) -> str:
    """The widget inputs changed since the last run of the workflow (monitors/engine/input_changes.py)."""
    changes = report.get("input_changes")
    if not isinstance(changes, Mapping):
        return ""
    rows = changes.get("changes")
    if changes.get("first_run") is True:
        return "<p>inputs: first run of this workflow</p>"
    if not isinstance(rows, list):
        reason = changes.get("unknown_reason")
        return f'<p class="muted">inputs changed: unknown ({esc(reason)})</p>' if changes.get("compared_with_prompt_id") else ""
    if not rows:
        return "<p>inputs: none changed since the last run</p>"
    body = "".join(
        f"<tr><td>#{esc(c.get('node_id'))} {esc(c.get('node_type') or '')}</td><td>{esc(c.get('input'))}</td>"
        f"<td class=mono>{esc(c.get('before'))} → {esc(c.get('after'))}</td></tr>"
        for c in rows
        if isinstance(c, Mapping)
    )
    more = (changes.get("n_changes") or 0) - len(rows)
    note = f'<p class="muted">{more} more not listed</p>' if more > 0 else ""
    return (
        f"<p>inputs changed since the last run ({esc(changes.get('compared_with_prompt_id'))}):</p>"
        f"<table><thead><tr><th>Node</th><th>Input</th><th>Before → now</th></tr></thead><tbody>{body}</tbody></table>{note}"
    )


def _weights_moved(node: Mapping) -> str:
    """'1.2 GiB in 0.80 s': the model weights loaded and unloaded while the node ran; '–': none."""
    moved = (node.get("weights_loaded_bytes") or 0) + (node.get("weights_unloaded_bytes") or 0)
    seconds = node.get("weights_moved_s")
    return "–" if not moved and not seconds else f"{format_bytes(moved)} in {format_seconds(seconds)}"


def _device_memory_head(nodes) -> str:
    """' · peak device memory X' where the node rows measured it (the process's, outside torch too)."""
    values = [v for v in (node_gpu_peak(n, "peak_process_used_bytes") for n in nodes) if v is not None]
    return f" · peak device memory {esc(format_value('peak_bytes', max(values)))}" if values else ""


def _device_memory_columns(nodes) -> list[str]:
    """The process device memory figures some node row has (none on a machine without NVML)."""
    names = ("peak_process_used_bytes", "peak_aimdo_used_bytes")
    return [name for name in names if any(node_gpu_peak(n, name) is not None for n in nodes)]


def _device_memory_cell(node: Mapping, name: str) -> str:
    value = node_gpu_peak(node, name)
    reason_key = name.removeprefix("peak_").removesuffix("_bytes") + "_unknown_reason"
    reasons = [p.get(reason_key) for p in node.get("gpu_peaks") or () if isinstance(p, Mapping)]
    reason = next((r for r in reasons if isinstance(r, str)), "") if value is None else ""
    return f'<td class=num title="{esc(reason)}">{esc(format_value("peak_bytes", value))}</td>'


def render_html(report: Mapping) -> str:
    report = upgrade_report(report)  # a version 1 report shows version 2 labels
    prompt_id = report.get("prompt_id")
    status = report.get("status") or "unknown"
    nodes = report.get("nodes") or []
    peak_rss = (report.get("span") or {}).get("peak_rss_bytes")
    gpu = [node_gpu_peak(n) for n in nodes]
    gpu = max((g for g in gpu if g is not None), default=None)
    head = (
        f'<p><span class="{esc(status)}"><b>{esc(status)}</b></span> · started {esc(_utc(report.get("started_unix_s")))}'
        f" · {esc(format_seconds(report.get('duration_s')))} · peak RSS {esc(format_value('peak_bytes', peak_rss))}"
        f" · peak GPU {esc(format_value('peak_bytes', gpu))}{_device_memory_head(nodes)} · {len(nodes)} nodes"
        f" ({sum(1 for n in nodes if n.get('cached'))} cached)</p>"
    )
    workflow = report.get("workflow") if isinstance(report.get("workflow"), Mapping) else {}
    workflow_name = workflow.get("name")
    named = f"<p>workflow <b>{esc(workflow_name)}</b></p>" if workflow_name else ""
    title = f"{workflow_name} · {prompt_id}" if workflow_name else prompt_id
    node_classes = {str(n.get("node_id")): n.get("class_type") for n in nodes if n.get("class_type")}
    steps = (
        "".join(step_html(s, node_classes) for s in report.get("steps") or []) or '<p class="muted">No monitor steps.</p>'
    )
    return (
        "<!DOCTYPE html><html lang=en><head><meta charset=utf-8>"
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">'
        '<meta name=viewport content="width=device-width, initial-scale=1">'
        f"<title>Pipeline Monitor · {esc(title)}</title><style>{STYLE}{DEEP_PROFILE_STYLE}</style></head><body>"
        f'<h1>Pipeline Monitor report</h1>{named}<p class="mono muted">prompt {esc(prompt_id)}</p>{head}'
        f"{input_changes_html(report)}"
        f"<h2>Errors and suggestions</h2>{problems_html(report)}"
        f"<h2>Timeline</h2>{timeline_svg(report)}"
        f"<h2>Time per node</h2>{breakdown_svg(report, 'duration_s', 'bar', format_seconds)}"
        # What each node added above its start: the process's peak would rank nodes by what ran before.
        f"<h2>RSS added per node (peak above its start)</h2>"
        f"{breakdown_svg(report, 'peak_rss_above_start_bytes', 'bar2', format_bytes)}"
        f"{subgraphs_html(report)}<h2>Monitor steps</h2>{steps}"
        f"<h2>Nodes</h2>{nodes_table(report)}"
        f"{model_residency_html(report)}"
        f"<h2>System</h2>{system_html(report.get('system') or {})}"
        f'<p class="muted">schema version {esc(report.get("schema_version"))} · profile '
        f"{'on' if report.get('profile_enabled', True) else 'off'} · made by Pipeline Monitor</p>"
        "</body></html>"
    )
