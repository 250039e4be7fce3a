"""Profiling configuration: YAML, presets, keyword arguments; errors name the key."""

import pytest

from monitors.pipeline_profiler.config import ConfigError, ProfilingConfig
from monitors.pipeline_profiler.config_files import load_config


def test_defaults():
    config = load_config()
    assert config == ProfilingConfig()
    assert config.enabled and config.writes_json and config.writes_html
    assert config.stage_enabled("inference_steps") and config.stage_enabled("anything_else")


@pytest.mark.parametrize("preset", ["development", "production"])
def test_presets_load_and_differ_as_documented(preset):
    config = load_config(preset=preset)
    assert config.tags["preset"] == preset
    if preset == "development":
        assert config.display.realtime and config.report.format == "both" and config.report.trace
        assert config.sampling.gpu_interval_s < 0.5
    else:
        assert not config.display.realtime and config.report.format == "json" and not config.report.trace
        assert config.max_data_points < ProfilingConfig().max_data_points


def test_yaml_file_then_keywords_win(tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text(
        "enabled: true\n"
        "sampling: {gpu_interval_s: 0.2}\n"
        "metrics: {gpu_power: true}\n"
        "report: {format: html, output_dir: out}\n"
        "stages: {vae_decode: false, my_stage: false}\n"
        "tags: {run: a}\n"
    )
    config = load_config(str(path), preset="production", report={"format": "json"}, tags={"extra": 1})
    assert (
        config.sampling.gpu_interval_s == 0.2 and config.sampling.cpu_interval_s == 2.0
    )  # merged key by key
    assert config.metrics.gpu_power and config.report.format == "json" and config.report.output_dir == "out"
    assert not config.stage_enabled("vae_decode") and not config.stage_enabled("my_stage")
    assert config.stage_enabled("text_encoding")
    assert config.tags == {"preset": "production", "run": "a", "extra": 1}


def test_integer_accepted_for_a_float():
    assert load_config(sampling={"cpu_interval_s": 2}).sampling.cpu_interval_s == 2.0


@pytest.mark.parametrize(
    ("keys", "message"),
    [
        ({"enabeld": True}, "enabeld: unknown key"),
        ({"sampling": {"gpu_interval": 1}}, "sampling.gpu_interval: unknown key"),
        ({"enabled": "yes"}, "enabled: must be true or false"),
        ({"enabled": 1}, "enabled: must be true or false"),
        ({"sampling": {"gpu_interval_s": "fast"}}, "sampling.gpu_interval_s: must be a number"),
        ({"sampling": {"gpu_interval_s": True}}, "sampling.gpu_interval_s: must be a number"),
        ({"sampling": {"cpu_interval_s": 0}}, "sampling.cpu_interval_s: must be greater than 0"),
        ({"sampling": 5}, "sampling: must be a mapping"),
        ({"max_data_points": 10.5}, "max_data_points: must be an integer"),
        ({"max_data_points": -1}, "max_data_points: must be greater than 0"),
        ({"report": {"format": "pdf"}}, "report.format: must be one of json, html, both"),
        ({"report": {"output_dir": ""}}, "report.output_dir: must be a non-empty string"),
        ({"display": {"realtime": "on"}}, "display.realtime: must be true or false"),
        ({"metrics": {"gpu_memory": None}}, "metrics.gpu_memory: must be true or false"),
        ({"stages": {"vae_decode": "no"}}, "stages.vae_decode: must be true or false"),
        ({"stages": ["vae_decode"]}, "stages: must be a mapping"),
        ({"tags": {"model": [1, 2]}}, "tags.model: must be a string, number or boolean"),
    ],
)
def test_wrong_keys_and_types_name_the_key(keys, message):
    with pytest.raises(ConfigError) as info:
        load_config(**keys)
    assert str(info.value).startswith(message)


def test_file_errors_name_the_file_and_key(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("report:\n  formats: both\n")
    with pytest.raises(ConfigError, match=r"bad\.yaml: report\.formats: unknown key"):
        load_config(str(path))
    path.write_text("enabled: [unclosed\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(str(path))
    path.write_text("- a list\n")
    with pytest.raises(ConfigError, match="must be a mapping"):
        load_config(str(path))
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(str(tmp_path / "missing.yaml"))


def test_empty_file_is_the_defaults(tmp_path):
    path = tmp_path / "empty.yaml"
    path.write_text("")
    assert load_config(str(path)) == ProfilingConfig()


@pytest.mark.parametrize("name", ["staging", "../development", "development.yaml"])
def test_unknown_preset(name):
    with pytest.raises(ConfigError, match="preset: unknown preset"):
        load_config(preset=name)


def test_to_dict_round_trips_through_keywords():
    config = load_config(preset="development", stages={"x": False})
    data = config.to_dict()
    assert load_config(**data) == config
