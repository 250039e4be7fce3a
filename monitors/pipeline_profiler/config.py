"""Configuration of the profiling API: its values, their defaults and the rules that merge a mapping
of keys (from a preset, a YAML file or keyword arguments: config_files.py reads them) into them.

Sections (sampling, metrics, display, report, stages, tags) merge key by key. An unknown key or a
wrong type is a ConfigError naming the key (e.g. `report.format`), never a silent default: a typo
in a production config should fail at start, not profile the wrong thing.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

REPORT_FORMATS = ("json", "html", "both")
STAGE_TEXT_ENCODING = "text_encoding"
STAGE_INFERENCE_STEPS = "inference_steps"
STAGE_VAE_DECODE = "vae_decode"


class ConfigError(ValueError):
    """A configuration value that cannot be used; the message starts with the key."""


@dataclass(frozen=True)
class SamplingConfig:
    gpu_interval_s: float = 0.5
    cpu_interval_s: float = 1.0


@dataclass(frozen=True)
class MetricsConfig:
    gpu_memory: bool = True
    gpu_utilization: bool = True
    gpu_temperature: bool = False
    gpu_power: bool = False
    cpu: bool = True
    system_memory: bool = True


@dataclass(frozen=True)
class DisplayConfig:
    realtime: bool = False
    interval_s: float = 5.0


@dataclass(frozen=True)
class ReportConfig:
    format: str = "both"  # json | html | both
    output_dir: str = "pipeline_monitor_reports"
    trace: bool = True


@dataclass(frozen=True)
class ProfilingConfig:
    enabled: bool = True
    sampling: SamplingConfig = field(default_factory=SamplingConfig)
    metrics: MetricsConfig = field(default_factory=MetricsConfig)
    display: DisplayConfig = field(default_factory=DisplayConfig)
    report: ReportConfig = field(default_factory=ReportConfig)
    max_data_points: int = 2000
    stages: Mapping[str, bool] = field(
        default_factory=lambda: {
            STAGE_TEXT_ENCODING: True,
            STAGE_INFERENCE_STEPS: True,
            STAGE_VAE_DECODE: True,
        }
    )
    tags: Mapping[str, Any] = field(default_factory=dict)

    def stage_enabled(self, stage: str) -> bool:
        """Stages without a toggle are always on."""
        return self.stages.get(stage, True)

    @property
    def writes_json(self) -> bool:
        return self.report.format in ("json", "both")

    @property
    def writes_html(self) -> bool:
        return self.report.format in ("html", "both")

    def to_dict(self) -> dict:
        return asdict(self) | {"stages": dict(self.stages), "tags": dict(self.tags)}


# -- validation --------------------------------------------------------------------------------------

_SECTIONS = {
    "sampling": SamplingConfig,
    "metrics": MetricsConfig,
    "display": DisplayConfig,
    "report": ReportConfig,
}
_POSITIVE = {"sampling.gpu_interval_s", "sampling.cpu_interval_s", "display.interval_s", "max_data_points"}


def _type_name(value: Any) -> str:
    return type(value).__name__


def _check_scalar(key: str, value: Any, default: Any) -> Any:
    if isinstance(default, bool):
        if not isinstance(value, bool):
            raise ConfigError(f"{key}: must be true or false, got {value!r} ({_type_name(value)})")
        return value
    if isinstance(default, int):
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{key}: must be an integer, got {value!r} ({_type_name(value)})")
    elif isinstance(default, float):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{key}: must be a number, got {value!r} ({_type_name(value)})")
        value = float(value)
    elif isinstance(default, str):
        if not isinstance(value, str) or not value:
            raise ConfigError(f"{key}: must be a non-empty string, got {value!r} ({_type_name(value)})")
    if key in _POSITIVE and not value > 0:
        raise ConfigError(f"{key}: must be greater than 0, got {value!r}")
    if key == "report.format" and value not in REPORT_FORMATS:
        raise ConfigError(f"{key}: must be one of {', '.join(REPORT_FORMATS)}, got {value!r}")
    return value


def _section(key: str, cls, current, values: Any):
    if not isinstance(values, Mapping):
        raise ConfigError(f"{key}: must be a mapping of keys to values, got {_type_name(values)}")
    known = {name: getattr(current, name) for name in cls.__dataclass_fields__}
    for name, value in values.items():
        if name not in known:
            raise ConfigError(f"{key}.{name}: unknown key (known: {', '.join(known)})")
        known[name] = _check_scalar(f"{key}.{name}", value, getattr(cls(), name))
    return cls(**known)


def _stages(current: Mapping[str, bool], values: Any) -> dict:
    if not isinstance(values, Mapping):
        raise ConfigError(f"stages: must be a mapping of stage names to true/false, got {_type_name(values)}")
    merged = dict(current)
    for name, value in values.items():
        if not isinstance(name, str) or not name:
            raise ConfigError(f"stages: stage names must be non-empty strings, got {name!r}")
        if not isinstance(value, bool):
            raise ConfigError(f"stages.{name}: must be true or false, got {value!r} ({_type_name(value)})")
        merged[name] = value
    return merged


def _tags(current: Mapping[str, Any], values: Any) -> dict:
    if not isinstance(values, Mapping):
        raise ConfigError(f"tags: must be a mapping of names to values, got {_type_name(values)}")
    merged = dict(current)
    for name, value in values.items():
        if not isinstance(name, str) or not name:
            raise ConfigError(f"tags: tag names must be non-empty strings, got {name!r}")
        if value is not None and not isinstance(value, (str, int, float, bool)):
            raise ConfigError(f"tags.{name}: must be a string, number or boolean, got {_type_name(value)}")
        merged[name] = value
    return merged


def merge_config(
    config: ProfilingConfig, values: Mapping[str, Any] | None, source: str = ""
) -> ProfilingConfig:
    """`config` with `values` (a parsed YAML mapping or keyword arguments) applied and checked."""
    if values is None:
        return config
    prefix = f"{source}: " if source else ""
    if not isinstance(values, Mapping):
        raise ConfigError(f"{prefix}the configuration must be a mapping, got {_type_name(values)}")
    fields = {name: getattr(config, name) for name in ProfilingConfig.__dataclass_fields__}
    try:
        for key, value in values.items():
            if key in _SECTIONS:
                fields[key] = _section(key, _SECTIONS[key], fields[key], value)
            elif key == "stages":
                fields[key] = _stages(fields[key], value)
            elif key == "tags":
                fields[key] = _tags(fields[key], value)
            elif key in ("enabled", "max_data_points"):
                fields[key] = _check_scalar(key, value, getattr(ProfilingConfig(), key))
            else:
                raise ConfigError(
                    f"{key}: unknown key (known: {', '.join(ProfilingConfig.__dataclass_fields__)})"
                )
    except ConfigError as exc:
        raise ConfigError(f"{prefix}{exc}") from None
    return ProfilingConfig(**fields)
