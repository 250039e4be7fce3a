"""Two run reports of the same workflow, compared field by field: what a refactor changed.

    python scripts/compare_reports.py BEFORE.json AFTER.json [--all]

A pure move of code must change no report. Two runs of one workflow always differ in what was
measured (times, memory and CPU readings) and in ids (prompt ids, object ids, patch UUIDs), so
those are listed apart as "measured" and only counted; every other difference is printed:
  structure  a key present in one report only, a value of another JSON type, a list of another length
  value      the same place with another value (a count, a norm, a shape, a label, a status)
Exit status: 0 when there is no structural and no value difference, 1 otherwise. Standard library
only; reports come from `scripts/queue_workflow.py --save FILE`.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Iterator

# A key that names a measurement or an id, anywhere in a place: it differs between any two runs.
MEASURED_KEY = re.compile(
    r"(_s|_unix_s|_ns|_ms|_pct|_per_s)$|^(span|memory|system_ram|system_available_memory|identity|"
    r"changes|lows|peaks|pid|hostname|prompt_id|run_id)$|rss|ram_|cpu|uuid|object_id|memory_above|"
    r"peak|allocated|reserved|^free$|free.*(_bytes|_pct)$|available|used_bytes|utilization|created|"
    r"started|ended|finished"
)
# Keys the pattern above would take for measurements, which are not: a LoRA file's share of keys
# matched, a setting.
NOT_MEASURED_KEYS = frozenset(("matched_pct", "threshold_pct"))
UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def flatten(value, place: str = "") -> Iterator[tuple[str, object]]:
    """(place, leaf) pairs; a place is a JSON-pointer-like path ("/steps/node 7 lora/summary/n_loras")."""
    if isinstance(value, dict):
        yield place, ("object", len(value))
        for key in sorted(value):
            yield from flatten(value[key], f"{place}/{key}")
    elif isinstance(value, list):
        yield place, ("array", len(value))
        for i, item in enumerate(value):
            yield from flatten(item, f"{place}/{_index(item, i)}")
    else:
        yield place, value


def _index(item, i: int) -> str:
    """A node row or a step by its node (and kind): their order follows measured start times."""
    if isinstance(item, dict) and isinstance(item.get("node_id"), str):
        return f"node {item['node_id']}" + (f" {item['kind']}" if isinstance(item.get("kind"), str) else "")
    return str(i)


def json_type(value) -> str:
    if isinstance(value, tuple):
        return value[0]
    if value is None:
        return "null"
    return {bool: "boolean", int: "number", float: "number", str: "string"}[type(value)]


def measured(place: str, value=None) -> bool:
    """A measurement or an id: a key of the place says so, or the value holds a UUID."""
    keys = [
        part.lower()
        for part in place.split("/")
        if part and not part.isdigit() and not part.startswith("node ")
    ]
    return any(key not in NOT_MEASURED_KEYS and MEASURED_KEY.search(key) for key in keys) or (
        isinstance(value, str) and bool(UUID.search(value))
    )


def compare(before: dict, after: dict) -> dict[str, list[str]]:
    a, b = dict(flatten(before)), dict(flatten(after))
    found: dict[str, list[str]] = {"structure": [], "value": [], "measured": []}
    for place in sorted(set(a) | set(b)):
        if place not in a or place not in b:
            found["structure"].append(f"{place}: only in {'after' if place not in a else 'before'}")
            continue
        x, y = a[place], b[place]
        if x == y:
            continue
        kinds = (json_type(x), json_type(y))
        if measured(place, x) or measured(place, y):
            found["measured"].append(f"{place}: {x!r} -> {y!r}")
        elif "null" not in kinds and kinds[0] != kinds[1] or isinstance(x, tuple):
            found["structure"].append(f"{place}: {x!r} -> {y!r}")
        else:
            found["value"].append(f"{place}: {x!r} -> {y!r}")
    return found


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("before")
    parser.add_argument("after")
    parser.add_argument("--all", action="store_true", help="also print the measured differences")
    args = parser.parse_args(argv)
    with open(args.before, encoding="utf-8") as f:
        before = json.load(f)
    with open(args.after, encoding="utf-8") as f:
        after = json.load(f)
    found = compare(before, after)
    for kind in ("structure", "value") + (("measured",) if args.all else ()):
        for line in found[kind]:
            sys.stdout.write(f"{kind:9}  {line}\n")
    counts = ", ".join(f"{len(v)} {k}" for k, v in found.items())
    sys.stdout.write(f"differences: {counts} (measured: times, memory and CPU readings, ids)\n")
    return 1 if found["structure"] or found["value"] else 0


if __name__ == "__main__":
    sys.exit(main())
