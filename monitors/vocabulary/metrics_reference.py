"""`docs/metrics-reference.md`: every figure the specification documents name, where it is in a
report (JSON path), its unit and how it is measured.

The rows are derived from the declarations: the step summaries' (monitors/<kind>/summary.py), the
declared details' (monitors/<kind>/details.py), the node rows' (monitors/node_fields.py) and the
deep profile's; the memory pictures' from their layout (reference_figure.py). Only the run's own
figures and the findings (reference_rows.py), the profiling session's and the usage statistics
(reference_session_rows.py) are hand-written rows. `python -m
monitors.vocabulary.generated_files --write` regenerates the document with the schema; a unit test
checks that every path named here appears in reports the test suite builds.

Path syntax: `steps[kind=K]` is the step of kind K, `[]` any element of a list, `*` any key of a
mapping (one entry per strategy...), `usage.` the dict of `get_usage_statistics()` (not a run
report).
"""

from __future__ import annotations

import os

from ..detail_fields import TRACEBACK
from ..engine.residency_fields import MODEL_RESIDENCY
from ..node_fields import NODE_ROW
from . import stages
from .reference_figure import SPECS, Figure
from .reference_rows import DETAIL_FIGURES, RUN_FIGURES
from .reference_session_rows import SESSION_AND_USAGE_FIGURES
from .registry import registry
from .subgraph_fields import SUBGRAPH_ROW

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DOC_PATH = os.path.join(REPO_ROOT, "docs", "metrics-reference.md")

# the figures outside the summaries, in the document's order
HAND_WRITTEN: tuple[Figure, ...] = (*RUN_FIGURES, *DETAIL_FIGURES, *SESSION_AND_USAGE_FIGURES)



def summary_figures() -> list[Figure]:
    """One row per declared summary field of every registered stage."""
    rows = []
    for stage in stages.STAGES:
        kind = stage.kind
        for f in stage.summary.fields:
            rows.append(
                Figure(
                    f.label,
                    stage.spec or "-",
                    f"steps[kind={kind}].summary.{f.name}",
                    f.unit,
                    f.description,
                )
            )
    return rows


def deep_profile_figures() -> list[Figure]:
    """The rows of a deep profile's `details.nodes` and their `top_ops`, from their declaration."""
    from ..deep_profile.summary import NODE_FIELDS, TOP_OP_FIELDS

    base = "steps[kind=deep_profile].details.nodes[]"
    rows = [Figure(f"deep profile node {f.label}", "PROF", f"{base}.{f.name}", f.unit, f.description)
            for f in NODE_FIELDS]
    rows += [Figure(f"deep profile top op {f.label}", "PROF", f"{base}.top_ops[].{f.name}", f.unit, f.description)
             for f in TOP_OP_FIELDS]
    return rows


def _gpu_only(path: str) -> bool:
    return "gpu" in path.lower()


def _declared_rows(group, base: str, spec: str, prefix: str = "") -> list[Figure]:
    """One row per declared figure below `group`, at `base` + its path (maps as `*`)."""
    rows = []
    for path, label, field in group.leaves():
        if field is TRACEBACK:
            continue  # the error of a monitor that failed outright, in no successful report
        path = path.replace("<name>", "*")
        figure = label if label.startswith(prefix) else f"{prefix}{label}"
        rows.append(Figure(figure, spec, f"{base}.{path}", field.unit, field.description, _gpu_only(path)))
    return rows


def node_figures() -> list[Figure]:
    """The node rows' figures, from their declaration (monitors/node_fields.py)."""
    return _declared_rows(NODE_ROW, "nodes[]", "PROF", "node ")


def subgraph_figures() -> list[Figure]:
    """The subgraph roll-ups' figures, from their declaration (subgraph_fields.py)."""
    return _declared_rows(SUBGRAPH_ROW, "subgraphs[]", "PROF", "subgraph ")


def residency_figures() -> list[Figure]:
    """The run's model loads and unloads, from their declaration (monitors/engine/residency_fields.py)."""
    return _declared_rows(MODEL_RESIDENCY, "model_residency", "PROF")


def detail_figures() -> dict[str, list[Figure]]:
    """kind -> the rows of its declared details (monitors/<kind>/details.py)."""
    return {
        stage.kind: _declared_rows(stage.details, f"steps[kind={stage.kind}].details", stage.spec or "-")
        for stage in stages.STAGES
        if stage.details is not None
    }


def all_figures() -> list[Figure]:
    details = [row for rows in detail_figures().values() for row in rows]
    return [
        *summary_figures(),
        *deep_profile_figures(),
        *node_figures(),
        *subgraph_figures(),
        *residency_figures(),
        *details,
        *HAND_WRITTEN,
    ]


def _cell(text) -> str:
    return "–" if text is None else str(text).replace("|", "\\|").replace("\n", " ")


def _table(rows: list[Figure]) -> list[str]:
    lines = ["| figure | spec | JSON path | unit | how it is measured |", "|---|---|---|---|---|"]
    for r in rows:
        how = r.how + (" (GPU only)" if r.gpu_only else "")
        lines.append(f"| {_cell(r.figure)} | {r.spec} | `{r.path}` | {_cell(r.unit)} | {_cell(how)} |")
    return lines


def document_text() -> str:
    lines = [
        "# Metrics reference",
        "",
        "<!-- GENERATED by `python -m monitors.vocabulary.generated_files --write` (monitors/vocabulary/metrics_reference.py); do not edit -->",
        "",
        "Every figure the specification documents name: where it is in a report (JSON path), its unit,",
        "and how it is measured. Unknown values are `null` with a reason beside them, never -1.",
        "Path syntax: `steps[kind=K]` is the step of kind K, `[]` any element of a list, `*` any key of",
        "a mapping, `usage.` the dict `get_usage_statistics()` returns (not a run report). Specifications: "
        + ", ".join(f"{k} = {v}" for k, v in SPECS.items())
        + ".",
        "",
        "Node rows are cheap (process RSS and torch allocator counters only); system RAM, NVML and",
        "GPU utilisation per step come with the steps that have a span of their own (`details.memory`:",
        "the VAE encode and profiling sessions). A text encode's figures are its node row's.",
        "",
        "## Step summaries (from the vocabulary declaration)",
        "",
    ]
    by_kind: dict[str, list[Figure]] = {}
    for row in summary_figures():
        kind = row.path.split("]")[0].split("=")[1]
        by_kind.setdefault(kind, []).append(row)
    for kind, rows in by_kind.items():
        lines += [f"### {registry()[kind].title} (`{kind}`)", "", *_table(rows), ""]
    lines += [
        "## Deep profile per node (from the vocabulary declaration)",
        "",
        "A deep-profiled prompt (`torch.profiler` over one prompt, asked for from the panel, the",
        "`/pipeline_monitor/deep_profile` route or `PIPELINE_MONITOR_DEEP_PROFILE=1`) has one row per",
        "executed node in `details.nodes`; ops and kernels are attributed to the node whose",
        "`record_function` range launched them.",
        "",
        *_table(deep_profile_figures()),
        "",
    ]
    lines += ["## Node rows (from the declaration)", "", *_table(node_figures()), ""]
    lines += ["## Subgraph roll-ups (from the declaration)", "", *_table(subgraph_figures()), ""]
    lines += ["## Model loads and unloads (from the declaration)", "", *_table(residency_figures()), ""]
    for kind, rows in detail_figures().items():
        lines += [f"## {registry()[kind].title} details (`{kind}`, from the declaration)", "", *_table(rows), ""]
    lines += ["## Run, memory pictures, profiling sessions and usage", "", *_table(list(HAND_WRITTEN)), ""]
    return "\n".join(lines)
