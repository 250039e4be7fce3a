"""Every run report the test session writes must validate against schemas/run_report.schema.json,
whose per-kind summaries allow only the keys the vocabulary declares (additionalProperties: false).

Reports are found on disk after the session: every JSON run report under pytest's base temporary
folder that is in a report folder (`reports/`, the profiling API's `pipeline_monitor_reports/`) or
is of the current schema version. That covers the in-process stores, the profiling API and the
real ComfyUI servers, whose base folders live there too. Version 1 reports are checked after the
v1 -> v2 upgrade, which must give a valid version 2 report.

The same reports are also scanned for values that are valid JSON but false (issue 13): an object's
repr anywhere (`<function ... at 0x...>`), a fallback claimed without an out-of-memory, throughput
of a dummy latent, a node that added more than the process's peak or a negative peak above start.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
REPORT_DIR_NAMES = {"reports", "pipeline_monitor_reports"}


def _looks_like_run_report(data) -> bool:
    return isinstance(data, dict) and "schema_version" in data and "prompt_id" in data and "steps" in data


def find_reports(root: Path, current_version: int):
    for dirpath, _dirnames, filenames in os.walk(root):
        in_report_dir = os.path.basename(dirpath) in REPORT_DIR_NAMES
        for name in filenames:
            if not name.endswith(".json") or name.startswith(".tmp-") or name.endswith(".trace.json"):
                continue
            path = Path(dirpath) / name
            try:
                data = json.loads(path.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                continue  # not a report (planted or corrupt files of bad-input tests)
            if not _looks_like_run_report(data):
                continue
            if in_report_dir or data.get("schema_version") == current_version:
                yield path, data


def _strings(value, path="$"):
    if isinstance(value, str):
        yield path, value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _strings(str(key), f"{path}.<key>")
            yield from _strings(item, f"{path}.{key}")
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _strings(item, f"{path}[{index}]")


def _vae_problems(step: dict, where: str) -> list[str]:
    problems = []
    summary = step.get("summary") or {}
    attempts = (step.get("details") or {}).get("attempts") or []
    ooms = summary.get("n_out_of_memory") or sum(1 for a in attempts if a.get("outcome") == "oom")
    for finding in step.get("findings") or []:
        message = finding.get("message") or ""
        if not ooms and "ran out of memory" in message:
            problems.append(f"{where}: claims an out-of-memory none of its attempts had: {message[:120]}")
    if summary.get("dummy_used") or summary.get("strategy_used") == "dummy":
        for key in ("frames_per_s", "input_mib_per_s"):
            if summary.get(key) is not None:
                problems.append(f"{where}: {key} {summary[key]} of a dummy latent (nothing was encoded)")
    return problems


def _node_problems(node: dict, where: str) -> list[str]:
    added, peak = node.get("peak_rss_above_start_bytes"), node.get("peak_rss_bytes")
    problems = []
    if isinstance(added, (int, float)) and added < 0:
        problems.append(f"{where}: peak RSS {added} below the node's own start")
    if isinstance(added, (int, float)) and isinstance(peak, (int, float)) and added > peak:
        problems.append(f"{where}: added {added} bytes, more than the process's peak {peak}")
    for gpu in node.get("gpu_peaks") or []:
        value = gpu.get("peak_allocated_above_start_bytes")
        if isinstance(value, (int, float)) and value < 0:
            problems.append(f"{where} {gpu.get('device')}: GPU peak {value} below the node's own start")
    return problems


def misleading_values(data: dict) -> list[str]:
    """What a report says that cannot be true, as short lines; [] for a clean report."""
    from monitors.report import OBJECT_REPR

    problems = [
        f"{path}: object repr {OBJECT_REPR.search(text).group(0)[:100]}"
        for path, text in _strings(data)
        if OBJECT_REPR.search(text)
    ]
    for index, step in enumerate(data.get("steps") or []):
        if isinstance(step, dict) and step.get("kind") == "vae_encode":
            problems += _vae_problems(step, f"steps[{index}] vae_encode")
    for index, node in enumerate(data.get("nodes") or []):
        if isinstance(node, dict):
            problems += _node_problems(node, f"nodes[{index}] #{node.get('node_id')}")
    return problems


def invalid_reports(root: Path) -> list[str]:
    import jsonschema

    from monitors.report import SCHEMA_VERSION
    from monitors.vocabulary.upgrade import upgrade_report

    schema = json.loads((REPO_ROOT / "schemas" / "run_report.schema.json").read_text(encoding="utf-8"))
    validator = jsonschema.Draft202012Validator(schema)
    problems = []
    for path, data in find_reports(root, SCHEMA_VERSION):
        errors = sorted(validator.iter_errors(upgrade_report(data)), key=lambda e: list(e.path))
        if errors:
            first = errors[0]
            problems.append(
                f"{path.relative_to(root)}: {len(errors)} schema error(s), first at "
                f"{first.json_path}: {first.message[:300]}"
            )
        misleading = misleading_values(data)
        if misleading:
            problems.append(
                f"{path.relative_to(root)}: {len(misleading)} false value(s): " + "; ".join(misleading[:5])
            )
    return problems
