"""Inferix's profiling YAML (a top-level `profiling:` mapping of flat keys) read as is.

`load_config` (config_files.py) calls `from_inferix` on every file whose top level holds `profiling:`; the result is
this pack's own configuration keys, checked by the same rules as any file. Inferix files are
written for another tool, so nothing in them stops a run: a key this pack has no counterpart for, a
value of the wrong type, or a setting it cannot follow is named in one warning each and left out.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import Any

from .config import (
    STAGE_INFERENCE_STEPS,
    STAGE_TEXT_ENCODING,
    STAGE_VAE_DECODE,
    ConfigError,
    ProfilingConfig,
    merge_config,
)

log = logging.getLogger(__name__)

INFERIX_SECTION = "profiling"

# Inferix key -> (section, key) of this pack's configuration; section None is a top-level key.
KEY_MAP: dict[str, tuple[str | None, str]] = {
    "enabled": (None, "enabled"),
    "real_time_display": ("display", "realtime"),
    "display_interval": ("display", "interval_s"),
    "gpu_monitor_interval": ("sampling", "gpu_interval_s"),
    "monitor_gpu_memory": ("metrics", "gpu_memory"),
    "monitor_gpu_utilization": ("metrics", "gpu_utilization"),
    "monitor_gpu_temperature": ("metrics", "gpu_temperature"),
    "monitor_gpu_power": ("metrics", "gpu_power"),
    "cpu_monitor_interval": ("sampling", "cpu_interval_s"),
    "monitor_cpu_usage": ("metrics", "cpu"),
    "monitor_system_memory": ("metrics", "system_memory"),
    "report_format": ("report", "format"),
    "output_dir": ("report", "output_dir"),
    "max_data_points": (None, "max_data_points"),
    "profile_inference_steps": ("stages", STAGE_INFERENCE_STEPS),
    "profile_vae_decode": ("stages", STAGE_VAE_DECODE),
    "profile_text_encoding": ("stages", STAGE_TEXT_ENCODING),
}
# Keys whose `true` is what this pack always does; `false` cannot be followed and is warned about.
ALWAYS_ON = {
    "generate_final_report": "the report is always built (usage statistics and aggregate read it); "
    "report_format chooses its files",
    "save_raw_data": "the sampled series stay in the report (steps[0].details.samples and the trace's "
    "counter tracks), at most max_data_points rows",
}
KNOWN_KEYS = frozenset(KEY_MAP) | frozenset(ALWAYS_ON) | {"session_tags"}


def is_inferix(data: Any) -> bool:
    return isinstance(data, Mapping) and INFERIX_SECTION in data


def _warn(source: str, message: str) -> None:
    log.warning("pipeline monitor: Inferix profiling config %s: %s", source or "(mapping)", message)


def _tag_value(value: Any) -> Any:
    """Tags are scalars here; Inferix allows any YAML value, kept as its JSON text."""
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return json.dumps(value, sort_keys=True, default=str)


def from_inferix(data: Mapping[str, Any], source: str = "") -> dict:
    """This pack's configuration mapping for an Inferix `profiling:` file; never raises."""
    section = data.get(INFERIX_SECTION)
    for key in data:
        if key != INFERIX_SECTION:
            _warn(source, f"{key}: outside 'profiling:', ignored")
    if section is None:
        return {}
    if not isinstance(section, Mapping):
        _warn(
            source, f"profiling: must be a mapping of keys to values, got {type(section).__name__}; ignored"
        )
        return {}
    out: dict[str, Any] = {}
    for key, value in section.items():
        where = f"profiling.{key}"
        if key in ALWAYS_ON:
            if value is not True:
                _warn(source, f"{where}: {value!r} is not followed: {ALWAYS_ON[key]}")
            continue
        if key == "session_tags":
            if not isinstance(value, Mapping):
                _warn(
                    source,
                    f"{where}: must be a mapping of names to values, got {type(value).__name__}; ignored",
                )
                continue
            candidate = {"tags": {str(k): _tag_value(v) for k, v in value.items()}}
        elif key in KEY_MAP:
            target_section, target = KEY_MAP[key]
            candidate = {target: value} if target_section is None else {target_section: {target: value}}
        else:
            _warn(source, f"{where}: not an Inferix profiling key this pack knows; ignored")
            continue
        try:  # the pack's own checks, one key at a time, so one bad value loses only itself
            merge_config(ProfilingConfig(), candidate)
        except ConfigError as exc:
            _warn(source, f"{where}: {exc}; ignored")
            continue
        for name, part in candidate.items():
            if isinstance(part, Mapping):
                out.setdefault(name, {}).update(part)
            else:
                out[name] = part
    return out
