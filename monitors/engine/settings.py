"""Runtime settings the panel's settings dialog changes (routes `GET/POST /pipeline_monitor/settings`).

sample_interval_ms  the background sampler's interval (Sampler.configure)
max_runs            runs kept in memory (RunStore.configure)
max_report_files    report files kept on disk, oldest pruned first (RunStore.configure)
profile_enabled     the per-node profile, from the next prompt on (recorder.profile_enabled)

A POST carries any subset; every value is validated before any is applied, so a bad request
changes nothing. Values live in the process only: the frontend stores the user's choices and
sends those that differ from the defaults when the page loads.
"""

from __future__ import annotations

import logging
import math

log = logging.getLogger(__name__)

# name -> (minimum, maximum) for integers; booleans have no range
INT_SETTINGS = {
    "sample_interval_ms": (50, 60_000),
    "max_runs": (1, 1000),
    "max_report_files": (1, 100_000),
}
BOOL_SETTINGS = ("profile_enabled",)


class SettingsError(ValueError):
    pass


def current_settings(runtime) -> dict:
    """`runtime`: anything with the sampler, store and recorder (nodes/runtime.py's Runtime)."""
    return {
        "sample_interval_ms": round(runtime.sampler.interval_s * 1000),
        "max_runs": runtime.store.max_runs,
        "max_report_files": runtime.store.max_files,
        "profile_enabled": bool(runtime.recorder.profile_enabled),
    }


def validate(changes: object) -> dict:
    if not isinstance(changes, dict):
        raise SettingsError("settings must be a JSON object")
    valid = {}
    for name, value in changes.items():
        if name in INT_SETTINGS:
            low, high = INT_SETTINGS[name]
            # JSON numbers: integral floats (1000.0) are fine, booleans are not numbers here
            # (NaN and Infinity, which Python's JSON parser accepts, are not: int() would raise)
            if (
                isinstance(value, bool)
                or not isinstance(value, (int, float))
                or not math.isfinite(value)
                or value != int(value)
            ):
                raise SettingsError(f"{name} must be an integer")
            if not low <= value <= high:
                raise SettingsError(f"{name} must be between {low} and {high}")
            valid[name] = int(value)
        elif name in BOOL_SETTINGS:
            if not isinstance(value, bool):
                raise SettingsError(f"{name} must be true or false")
            valid[name] = value
        else:
            raise SettingsError(f"unknown setting {name!r}")
    return valid


def apply_settings(runtime, changes: dict) -> dict:
    """Validate all, then apply; returns the settings in force."""
    valid = validate(changes)
    if "sample_interval_ms" in valid:
        runtime.sampler.configure(interval_s=valid["sample_interval_ms"] / 1000.0)
    if "max_runs" in valid or "max_report_files" in valid:
        runtime.store.configure(max_runs=valid.get("max_runs"), max_files=valid.get("max_report_files"))
    if "profile_enabled" in valid:
        runtime.recorder.profile_enabled = valid["profile_enabled"]
    if valid:
        log.info("pipeline monitor: settings changed: %s", valid)
    return current_settings(runtime)
