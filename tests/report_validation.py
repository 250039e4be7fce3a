"""Every run report the test session writes must validate against schemas/run_report.schema.json,
whose per-kind summaries allow only the keys the vocabulary declares (additionalProperties: false).

Reports are found on disk after the session: every JSON run report under pytest's base temporary
folder that is in a report folder (`reports/`, the profiling API's `pipeline_monitor_reports/`) or
is of the current schema version. That covers the in-process stores, the profiling API and the
real ComfyUI servers, whose base folders live there too. Version 1 reports are checked after the
v1 -> v2 upgrade, which must give a valid version 2 report.
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


def invalid_reports(root: Path) -> list[str]:
    import jsonschema

    from monitors.report import SCHEMA_VERSION
    from monitors.vocabulary import upgrade_report

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
    return problems
