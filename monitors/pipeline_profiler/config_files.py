"""Reading the profiling API's configuration: a preset, a YAML file and the same keys as keyword
arguments.

    config = load_config("profiling.yaml", preset="development", report={"format": "json"})

Layers, later wins: built-in defaults, the preset (`monitors/pipeline_profiler/presets/<name>.yaml`),
the file, the keyword arguments, each merged by config.py's rules. The exception is a file in
Inferix's format (top-level `profiling:`), written for another tool: inferix_config.py translates
it and names what it cannot follow in warnings.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from .config import ConfigError, ProfilingConfig, merge_config
from .inferix_config import from_inferix, is_inferix

PRESETS_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "presets")


def read_yaml(path: str) -> Mapping[str, Any]:
    import yaml  # PyYAML; imported here so that importing the profiling API costs nothing more

    try:
        with open(path, encoding="utf-8") as f:
            data = yaml.safe_load(f)
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read ({exc.strerror or exc})") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML ({exc})") from None
    return {} if data is None else data


def preset_path(name: str) -> str:
    path = os.path.join(PRESETS_DIR, f"{name}.yaml")
    if os.path.basename(name) != name or not os.path.isfile(path):
        names = sorted(f[:-5] for f in os.listdir(PRESETS_DIR) if f.endswith(".yaml"))
        raise ConfigError(f"preset: unknown preset {name!r} (known: {', '.join(names)})")
    return path


def load_config(path: str | None = None, *, preset: str | None = None, **overrides) -> ProfilingConfig:
    """Defaults <- preset <- YAML file <- keyword arguments (the same keys as the file)."""
    config = ProfilingConfig()
    if preset is not None:
        config = merge_config(config, read_yaml(preset_path(preset)), f"preset {preset}")
    if path is not None:
        source, data = os.fspath(path), read_yaml(os.fspath(path))
        if is_inferix(data):  # Inferix's `profiling:` file, read as is (warnings, never errors)
            data = from_inferix(data, source)
        config = merge_config(config, data, source)
    return merge_config(config, overrides)
