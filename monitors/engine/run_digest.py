"""The end-of-prompt message a headless client gets (websocket event `pipeline_monitor.run_digest`
to the client id that queued the prompt, nodes/headless.py): a run report cut to what a script
prints, with the report's URLs. Made from the report dict; pure and bounded."""

from __future__ import annotations

from collections.abc import Mapping

from ..report import run_summary

DIGEST_EVENT = "pipeline_monitor.run_digest"
ROUTE_PREFIX = "/pipeline_monitor"
N_SLOWEST = 5
MAX_FINDINGS = 20
MAX_SUBGRAPHS = 50
MAX_MESSAGE_CHARS = 300


def report_urls(prompt_id: str) -> dict:
    """Paths on the ComfyUI server (also under /api/...)."""
    base = f"{ROUTE_PREFIX}/runs/{prompt_id}"
    return {"report_url": base, "report_html_url": f"{base}/report.html"}


def _slowest(nodes: list[Mapping]) -> list[dict]:
    timed = [n for n in nodes if isinstance(n.get("duration_s"), (int, float))]
    timed.sort(key=lambda n: n["duration_s"], reverse=True)
    keys = ("node_id", "class_type", "title", "duration_s", "peak_rss_above_start_bytes")
    return [{k: n.get(k) for k in keys} for n in timed[:N_SLOWEST]]


def _findings(steps: list[Mapping]) -> list[dict]:
    found = []
    for step in steps:
        for finding in step.get("findings") or ():
            if isinstance(finding, Mapping) and len(found) < MAX_FINDINGS:
                found.append(
                    {
                        "kind": step.get("kind"),
                        "node_id": step.get("node_id"),
                        "level": finding.get("level"),
                        "code": finding.get("code"),
                        "message": str(finding.get("message") or "")[:MAX_MESSAGE_CHARS],
                    }
                )
    return found


def run_digest(report: Mapping) -> dict:
    """The run's summary row (status, duration, peaks, counts), its slowest nodes, its subgraph
    roll-ups, its findings and the URLs of its JSON and HTML report."""
    nodes = [n for n in report.get("nodes") or () if isinstance(n, Mapping)]
    steps = [s for s in report.get("steps") or () if isinstance(s, Mapping)]
    subgraphs = [dict(s) for s in report.get("subgraphs") or () if isinstance(s, Mapping)]
    summary = run_summary(report)
    return {
        **summary,
        "error": report.get("error"),
        "slowest_nodes": _slowest(nodes),
        "subgraphs": subgraphs[:MAX_SUBGRAPHS],
        "n_subgraphs": len(subgraphs),
        "findings": _findings(steps),
        **report_urls(str(report.get("prompt_id"))),
    }
