"""Values with their units for people (HTML report and node text; web/lib/format.mjs mirrors it),
and labels for keys no kind declares."""

from __future__ import annotations

import json
import math
from typing import Any

from .. import report as run_report
from ..summary_fields import SummaryField

MISSING = "–"


def format_bytes(n: int | float | None) -> str:
    return MISSING if n is None else run_report.format_bytes(n)


def format_seconds(seconds: float | None) -> str:
    if seconds is None:
        return MISSING
    a = abs(seconds)
    if a < 1:
        return f"{seconds * 1000:.1f} ms" if a < 0.01 else f"{seconds * 1000:.0f} ms"
    return f"{seconds:.2f} s" if a < 120 else f"{seconds / 60:.1f} min"


def _plain_number(value: float) -> str:
    if isinstance(value, int):
        return f"{value:,}"
    if float(value).is_integer() and abs(value) < 1e15:
        return f"{int(value):,}"
    a = abs(value)
    if a != 0 and (a < 1e-3 or a >= 1e6):
        return f"{value:.3e}"
    return f"{value:.4g}"


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _array_item(value) -> str:
    """An item of a short list, numbers rounded as every plain number is (the panel does the same)."""
    if value is None:
        return "null"
    if isinstance(value, float) and not float(value).is_integer():
        return _plain_number(value)  # integers stay as they are (a shape's 1024, not 1,024)
    return str(value)


def unit_of_key(name: str) -> str | None:
    """The unit a name implies, for keys that are not declared (run-level figures, unknown kinds)."""
    if name.endswith("_per_s"):
        return "per_s"
    if name.endswith("_bytes"):
        return "bytes"
    if name.endswith("_s"):
        return "s"
    if name.endswith("_pct"):
        return "pct"
    if name.endswith("_ratio"):
        return "ratio"
    return None


def format_with_unit(unit: str | None, value: Any) -> str:
    if value is None:
        return MISSING
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, (int, float)):
        if isinstance(value, float) and not math.isfinite(value):
            return MISSING
        if unit == "bytes":
            return format_bytes(value)
        if unit == "s":
            return format_seconds(value)
        if unit == "pct":
            return f"{value:.1f} %"
        if unit == "fraction":
            return f"{100 * value:.2f} %"
        if unit == "ratio":
            return f"{_plain_number(value)}×"
        if unit == "per_s":
            return f"{_plain_number(value)}/s"
        return _plain_number(value)
    if isinstance(value, str):
        return value
    if (
        isinstance(value, (list, tuple))
        and len(value) <= 8
        and all(v is None or isinstance(v, (int, float, str, bool)) for v in value)
    ):
        return "[" + ", ".join(_array_item(v) for v in value) + "]"
    text = json.dumps(value, default=str)
    return text if len(text) <= 160 else text[:159] + "…"


def format_value(field_or_key: SummaryField | str, value: Any) -> str:
    """A value for people with its unit: a declared field's unit, else the unit its name implies."""
    if isinstance(field_or_key, SummaryField):
        if field_or_key.unit == "per_s" and "per second" in field_or_key.label and _is_number(value):
            return _plain_number(value)  # "frames per second: 1.905", as the panel shows it
        return format_with_unit(field_or_key.unit, value)
    return format_with_unit(unit_of_key(field_or_key), value)


def label_from_key(name: str) -> str:
    """A label for keys no kind declares: the name without its unit suffix, `n_x` -> `x (count)`."""
    key = name
    for suffix in ("_bytes", "_pct", "_ratio", "_s"):
        if suffix == "_s" and key.endswith("_per_s"):
            break
        if key.endswith(suffix) and len(key) > len(suffix):
            key = key[: -len(suffix)]
            break
    if key.startswith("n_") and len(key) > 2:
        return key[2:].replace("_", " ") + " (count)"
    return key.replace("_", " ")
