"""monitors.pipeline_profiler.inferix_config.from_inferix on mappings: the pack's keys it gives, and the
one warning per key it cannot follow, word for word."""

import logging

import pytest

from monitors.pipeline_profiler.inferix_config import KNOWN_KEYS, from_inferix, is_inferix


@pytest.fixture
def warnings(caplog):
    caplog.set_level(logging.WARNING, logger="monitors.pipeline_profiler.inferix_config")

    def read():
        return [r.getMessage() for r in caplog.records if r.name == "monitors.pipeline_profiler.inferix_config"]

    return read


def test_is_inferix_only_for_a_mapping_with_a_profiling_key():
    assert is_inferix({"profiling": None}) and is_inferix({"profiling": {}, "x": 1})
    assert not is_inferix({"report": {}}) and not is_inferix(["profiling"]) and not is_inferix(None)


def test_keys_of_one_section_are_merged(warnings):
    out = from_inferix(
        {
            "profiling": {
                "enabled": False,
                "gpu_monitor_interval": 0.2,
                "cpu_monitor_interval": 2,
                "monitor_gpu_power": True,
                "monitor_cpu_usage": False,
                "profile_vae_decode": False,
                "profile_text_encoding": True,
                "output_dir": "out",
                "generate_final_report": True,
                "save_raw_data": True,
            }
        },
        "run.yaml",
    )
    assert out == {
        "enabled": False,
        "sampling": {"gpu_interval_s": 0.2, "cpu_interval_s": 2},
        "metrics": {"gpu_power": True, "cpu": False},
        "stages": {"vae_decode": False, "text_encoding": True},
        "report": {"output_dir": "out"},
    }
    assert warnings() == []


def test_what_cannot_be_followed_is_named_once_each(warnings):
    out = from_inferix(
        {
            "tool": 1,
            "profiling": {
                "save_raw_data": False,
                "max_data_points": 0,
                "session_tags": ["a"],
                "monitor_disk": True,
                "real_time_display": True,
            },
        },
        "run.yaml",
    )
    assert out == {"display": {"realtime": True}}
    prefix = "pipeline monitor: Inferix profiling config run.yaml: "
    assert warnings() == [
        prefix + "tool: outside 'profiling:', ignored",
        prefix + "profiling.save_raw_data: False is not followed: the sampled series stay in the report "
        "(steps[0].details.samples and the trace's counter tracks), at most max_data_points rows",
        prefix + "profiling.max_data_points: max_data_points: must be greater than 0, got 0; ignored",
        prefix + "profiling.session_tags: must be a mapping of names to values, got list; ignored",
        prefix + "profiling.monitor_disk: not an Inferix profiling key this pack knows; ignored",
    ]


def test_a_section_that_is_empty_or_not_a_mapping(warnings):
    assert from_inferix({"profiling": None}) == {}
    assert warnings() == []
    assert from_inferix({"profiling": [1]}) == {}
    assert warnings() == [
        "pipeline monitor: Inferix profiling config (mapping): profiling: must be a mapping of keys to values, "
        "got list; ignored"
    ]


def test_session_tags_keep_scalars_and_write_the_rest_as_json(warnings):
    out = from_inferix(
        {"profiling": {"session_tags": {"n": 1, "on": False, "none": None, 2: {"b": 1, "a": [1]}}}}
    )
    assert out == {"tags": {"n": 1, "on": False, "none": None, "2": '{"a": [1], "b": 1}'}}
    assert warnings() == []


def test_known_keys_cover_the_map_the_always_on_keys_and_tags():
    assert {"session_tags", "save_raw_data", "generate_final_report", "report_format"} <= KNOWN_KEYS
