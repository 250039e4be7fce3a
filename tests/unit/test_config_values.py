"""monitors.pipeline_profiler.config: the default values, which files each format writes, and the
error messages word for word (they name the key, the value and its type)."""

import dataclasses

import pytest

from monitors.pipeline_profiler.config import ConfigError, ProfilingConfig, merge_config
from monitors.pipeline_profiler.config_files import load_config


def test_default_values():
    c = ProfilingConfig()
    assert (c.enabled, c.max_data_points, dict(c.tags)) == (True, 2000, {})
    assert (c.sampling.gpu_interval_s, c.sampling.cpu_interval_s) == (0.5, 1.0)
    m = c.metrics
    assert (m.gpu_memory, m.gpu_utilization, m.gpu_temperature, m.gpu_power, m.cpu, m.system_memory) == (
        True,
        True,
        False,
        False,
        True,
        True,
    )
    assert (c.display.realtime, c.display.interval_s) == (False, 5.0)
    assert (c.report.format, c.report.output_dir, c.report.trace) == (
        "both",
        "pipeline_monitor_reports",
        True,
    )
    assert dict(c.stages) == {"text_encoding": True, "inference_steps": True, "vae_decode": True}


@pytest.mark.parametrize(
    ("fmt", "json_file", "html_file"), [("json", True, False), ("html", False, True), ("both", True, True)]
)
def test_which_files_each_format_writes(fmt, json_file, html_file):
    c = load_config(report={"format": fmt})
    assert (c.writes_json, c.writes_html) == (json_file, html_file)


def test_stage_toggles_and_tags_are_merged():
    c = load_config(stages={"vae_decode": False}, tags={"a": None, "b": 1.5, "c": True})
    assert c.stage_enabled("vae_decode") is False and c.stage_enabled("text_encoding") is True
    assert c.stage_enabled("new") is True
    assert dict(c.tags) == {"a": None, "b": 1.5, "c": True}
    assert c.to_dict()["stages"] == {"text_encoding": True, "inference_steps": True, "vae_decode": False}


def test_a_float_given_as_an_int_becomes_a_float_and_ints_stay_ints():
    c = load_config(display={"interval_s": 2}, max_data_points=5)
    assert type(c.display.interval_s) is float and type(c.max_data_points) is int


@pytest.mark.parametrize(
    ("keys", "message"),
    [
        ({"enabled": "yes"}, "enabled: must be true or false, got 'yes' (str)"),
        ({"max_data_points": True}, "max_data_points: must be an integer, got True (bool)"),
        ({"max_data_points": 0}, "max_data_points: must be greater than 0, got 0"),
        ({"display": {"interval_s": -1.0}}, "display.interval_s: must be greater than 0, got -1.0"),
        (
            {"sampling": {"gpu_interval_s": None}},
            "sampling.gpu_interval_s: must be a number, got None (NoneType)",
        ),
        ({"report": {"output_dir": 3}}, "report.output_dir: must be a non-empty string, got 3 (int)"),
        ({"report": {"format": "pdf"}}, "report.format: must be one of json, html, both, got 'pdf'"),
        ({"report": [1]}, "report: must be a mapping of keys to values, got list"),
        ({"display": {"size": 1}}, "display.size: unknown key (known: realtime, interval_s)"),
        ({"stages": {"": True}}, "stages: stage names must be non-empty strings, got ''"),
        ({"stages": {1: True}}, "stages: stage names must be non-empty strings, got 1"),
        ({"stages": "x"}, "stages: must be a mapping of stage names to true/false, got str"),
        ({"stages": {"a": 1}}, "stages.a: must be true or false, got 1 (int)"),
        ({"tags": 1}, "tags: must be a mapping of names to values, got int"),
        ({"tags": {"": 1}}, "tags: tag names must be non-empty strings, got ''"),
        ({"tags": {"t": {}}}, "tags.t: must be a string, number or boolean, got dict"),
        (
            {"colour": 1},
            "colour: unknown key (known: enabled, sampling, metrics, display, report, max_data_points, stages, tags)",
        ),
    ],
)
def test_error_messages(keys, message):
    with pytest.raises(ConfigError) as info:
        load_config(**keys)
    assert str(info.value) == message


def test_merge_config_names_its_source():
    with pytest.raises(ConfigError) as info:
        merge_config(ProfilingConfig(), {"enabled": 1}, "my.yaml")
    assert str(info.value) == "my.yaml: enabled: must be true or false, got 1 (int)"
    with pytest.raises(ConfigError) as info:
        merge_config(ProfilingConfig(), [1], "my.yaml")
    assert str(info.value) == "my.yaml: the configuration must be a mapping, got list"
    assert merge_config(ProfilingConfig(), None) == ProfilingConfig()


def test_unknown_preset_lists_the_known_ones():
    with pytest.raises(ConfigError) as info:
        load_config(preset="fast")
    assert str(info.value) == "preset: unknown preset 'fast' (known: development, production)"


def test_a_preset_then_a_file_then_keywords(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("max_data_points: 7\ndisplay: {interval_s: 9}\n")
    c = load_config(str(path), preset="development", max_data_points=8)
    assert c.max_data_points == 8 and c.display.interval_s == 9.0
    assert c.tags["preset"] == "development"
    assert load_config(path).max_data_points == 7  # a path object too


@pytest.mark.parametrize(
    ("obj", "name"),
    [
        (ProfilingConfig(), "enabled"),
        (ProfilingConfig().sampling, "gpu_interval_s"),
        (ProfilingConfig().metrics, "cpu"),
        (ProfilingConfig().display, "realtime"),
        (ProfilingConfig().report, "format"),
    ],
)
def test_a_configuration_cannot_be_changed_in_place(obj, name):
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(obj, name, getattr(obj, name))


def test_an_unreadable_file_says_why(tmp_path):
    missing = tmp_path / "missing.yaml"
    with pytest.raises(ConfigError) as info:
        load_config(str(missing))
    assert str(info.value) == f"{missing}: cannot read (No such file or directory)"
