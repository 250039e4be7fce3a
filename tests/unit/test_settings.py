"""The panel's runtime settings on a stand-in runtime: each bound inclusive, JSON's integral floats
accepted, booleans and non-finite numbers refused, nothing applied when one value is bad."""

from __future__ import annotations

import math

import pytest

from monitors.engine.settings import (
    BOOL_SETTINGS,
    INT_SETTINGS,
    SettingsError,
    apply_settings,
    current_settings,
    validate,
)


class Sampler:
    def __init__(self):
        self.interval_s = 0.5
        self.configured = []

    def configure(self, interval_s=None):
        self.configured.append(interval_s)
        self.interval_s = interval_s


class Store:
    def __init__(self):
        self.max_runs, self.max_files = 100, 500
        self.configured = []

    def configure(self, max_runs=None, max_files=None):
        self.configured.append((max_runs, max_files))
        if max_runs is not None:
            self.max_runs = max_runs
        if max_files is not None:
            self.max_files = max_files


class Recorder:
    profile_enabled = 1  # truthy, not a bool: read as one


class Runtime:
    def __init__(self):
        self.sampler, self.store, self.recorder = Sampler(), Store(), Recorder()


def test_the_settings_in_force_in_their_units():
    runtime = Runtime()
    runtime.sampler.interval_s = 0.2505
    assert current_settings(runtime) == {
        "sample_interval_ms": 250,
        "max_runs": 100,
        "max_report_files": 500,
        "profile_enabled": True,
    }


def test_the_ranges():
    assert INT_SETTINGS == {
        "sample_interval_ms": (50, 60_000),
        "max_runs": (1, 1000),
        "max_report_files": (1, 100_000),
    }
    assert BOOL_SETTINGS == ("profile_enabled",)


@pytest.mark.parametrize("name", sorted(INT_SETTINGS))
def test_each_bound_is_inclusive(name):
    low, high = INT_SETTINGS[name]
    assert validate({name: low}) == {name: low} and validate({name: high}) == {name: high}
    for value in (low - 1, high + 1):
        with pytest.raises(SettingsError, match=f"{name} must be between {low} and {high}"):
            validate({name: value})


def test_an_integral_float_is_an_integer():
    valid = validate({"max_runs": 10.0})
    assert valid == {"max_runs": 10} and type(valid["max_runs"]) is int


@pytest.mark.parametrize("value", [True, False, 10.5, "10", None, math.inf, -math.inf, math.nan, [10]])
def test_what_is_not_an_integer(value):
    with pytest.raises(SettingsError, match="max_runs must be an integer"):
        validate({"max_runs": value})


def test_booleans_and_unknown_names():
    assert validate({"profile_enabled": False}) == {"profile_enabled": False}
    for value in (0, 1, "true", None):
        with pytest.raises(SettingsError, match="profile_enabled must be true or false"):
            validate({"profile_enabled": value})
    with pytest.raises(SettingsError, match="unknown setting 'colour'"):
        validate({"colour": "red"})
    for body in ([], "x", None):
        with pytest.raises(SettingsError, match="settings must be a JSON object"):
            validate(body)
    assert validate({}) == {}


def test_apply_changes_each_owner_in_its_units():
    runtime = Runtime()
    result = apply_settings(runtime, {"sample_interval_ms": 250, "profile_enabled": False})
    assert runtime.sampler.configured == [0.25] and runtime.store.configured == []
    assert runtime.recorder.profile_enabled is False
    assert result == {
        "sample_interval_ms": 250,
        "max_runs": 100,
        "max_report_files": 500,
        "profile_enabled": False,
    }
    apply_settings(runtime, {"max_runs": 7})
    apply_settings(runtime, {"max_report_files": 9})
    assert runtime.store.configured == [(7, None), (None, 9)]
    assert runtime.sampler.configured == [0.25]


def test_apply_nothing_changes_nothing():
    runtime = Runtime()
    assert apply_settings(runtime, {}) == current_settings(runtime)
    assert runtime.sampler.configured == [] and runtime.store.configured == []
    assert runtime.recorder.profile_enabled == 1


def test_one_bad_value_applies_none():
    runtime = Runtime()
    with pytest.raises(SettingsError):
        apply_settings(runtime, {"sample_interval_ms": 100, "max_runs": 0})
    assert runtime.sampler.configured == [] and runtime.store.configured == []
