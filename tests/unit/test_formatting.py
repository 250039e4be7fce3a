"""Values with their units for people (monitors/vocabulary/formatting.py): the exact text of each
unit at its bounds, the plain numbers, the lists and the long values, and the labels of keys no
kind declares. web/lib/format.mjs mirrors these texts."""

from __future__ import annotations

import math

import pytest

from monitors.summary_fields import SummaryField
from monitors.vocabulary import formatting
from monitors.vocabulary.formatting import (
    MISSING,
    format_bytes,
    format_seconds,
    format_value,
    format_with_unit,
    label_from_key,
    unit_of_key,
)


def test_bytes_and_missing():
    assert format_bytes(None) == MISSING == "–"
    assert format_bytes(0) == "0 B"
    assert format_bytes(1536) == "1.5 KiB"


@pytest.mark.parametrize(
    "seconds,text",
    [
        (None, "–"),
        (0.0, "0.0 ms"),
        (0.0042, "4.2 ms"),  # under 10 ms: one decimal
        (0.00999, "10.0 ms"),
        (0.01, "10 ms"),  # from 10 ms: whole milliseconds
        (0.25, "250 ms"),
        (-0.25, "-250 ms"),  # the size of a change decides, not its sign
        (0.9996, "1000 ms"),
        (1.0, "1.00 s"),  # from 1 s: seconds
        (-1.5, "-1.50 s"),
        (119.994, "119.99 s"),
        (120.0, "2.0 min"),  # from 2 minutes: minutes
        (-180.0, "-3.0 min"),
        (3600.0, "60.0 min"),
    ],
)
def test_seconds_at_each_bound(seconds, text):
    assert format_seconds(seconds) == text


@pytest.mark.parametrize(
    "value,text",
    [
        (1234567, "1,234,567"),  # an int with thousands separators
        (12.0, "12"),  # a whole float reads as an int
        (-3.0, "-3"),
        (2.0e14, "200,000,000,000,000"),
        (1.0e15, "1.000e+15"),  # from 1e15 a whole float is scientific
        (1.0e16, "1.000e+16"),
        (0.0, "0"),
        (0.5, "0.5"),
        (0.001, "0.001"),  # 1e-3 itself is plain
        (0.00099, "9.900e-04"),  # under 1e-3: scientific
        (-0.00099, "-9.900e-04"),
        (999999.5, "1e+06"),  # under 1e6: four significant digits
        (1000000.5, "1.000e+06"),  # from 1e6: scientific
        (3.14159, "3.142"),
    ],
)
def test_plain_numbers(value, text):
    assert format_with_unit(None, value) == text


@pytest.mark.parametrize(
    "name,unit",
    [
        ("items_per_s", "per_s"),
        ("size_bytes", "bytes"),
        ("wall_s", "s"),
        ("used_pct", "pct"),
        ("change_ratio", "ratio"),
        ("n_keys", None),
        ("status", None),
    ],
)
def test_unit_a_name_implies(name, unit):
    assert unit_of_key(name) == unit


@pytest.mark.parametrize(
    "unit,value,text",
    [
        ("bytes", 3 * 1024**2, "3.0 MiB"),
        ("bytes", 512, "512 B"),
        ("s", 0.05, "50 ms"),
        ("s", 2.5, "2.50 s"),
        ("pct", 12.345, "12.3 %"),
        ("fraction", 0.0123, "1.23 %"),
        ("fraction", 1.0, "100.00 %"),
        ("ratio", 64.0, "64×"),
        ("ratio", 0.5, "0.5×"),
        ("per_s", 2.5, "2.5/s"),
        ("per_s", 1200, "1,200/s"),
        ("count", 7, "7"),
        (None, 7, "7"),
    ],
)
def test_each_unit(unit, value, text):
    assert format_with_unit(unit, value) == text


@pytest.mark.parametrize("unit", [None, "bytes", "s", "pct", "fraction", "ratio", "per_s"])
def test_missing_booleans_and_non_finite_values(unit):
    assert format_with_unit(unit, None) == MISSING
    assert format_with_unit(unit, True) == "yes"
    assert format_with_unit(unit, False) == "no"
    assert format_with_unit(unit, math.nan) == MISSING
    assert format_with_unit(unit, math.inf) == MISSING
    assert format_with_unit(unit, -math.inf) == MISSING


def test_strings_and_short_lists_as_they_are():
    assert format_with_unit("bytes", "n/a") == "n/a"
    assert format_with_unit(None, "") == ""
    assert format_with_unit(None, [1, None, "a", 2.5, True]) == "[1, null, a, 2.5, True]"
    assert format_with_unit(None, (1, 2)) == "[1, 2]"
    assert format_with_unit(None, []) == "[]"
    assert format_with_unit(None, ["a"] * 8) == "[a, a, a, a, a, a, a, a]"  # up to 8 items


def test_long_or_nested_lists_and_mappings_as_json():
    assert format_with_unit(None, ["a"] * 9) == '["a", "a", "a", "a", "a", "a", "a", "a", "a"]'  # JSON
    assert format_with_unit(None, [{"a": 1}]) == '[{"a": 1}]'
    assert format_with_unit(None, [None, {"a": 1}]) == '[null, {"a": 1}]'  # JSON's null
    assert format_with_unit(None, [None, 1]) == "[null, 1]"
    assert format_with_unit(None, {"a": None, "b": [1]}) == '{"a": null, "b": [1]}'
    assert format_with_unit("bytes", {"a": 1}) == '{"a": 1}'


def test_json_text_is_cut_at_160_characters():
    fits = {"k": "x" * (160 - len('{"k": ""}'))}
    assert len(format_with_unit(None, fits)) == 160
    assert format_with_unit(None, fits) == '{"k": "' + "x" * 151 + '"}'
    longer = {"k": "x" * (161 - len('{"k": ""}'))}
    text = format_with_unit(None, longer)
    assert len(text) == 160 and text == '{"k": "' + "x" * 152 + "…"


def test_a_declared_field_formats_by_its_unit_a_key_by_its_name():
    declared = SummaryField("odd_name", "odd", "bytes", "declared in bytes", "integer")
    assert format_value(declared, 2048) == "2.0 KiB"  # the name implies no unit
    assert format_value("odd_name", 2048) == "2,048"
    assert format_value("size_bytes", 2048) == "2.0 KiB"
    assert format_value("wall_s", 0.5) == "500 ms"
    assert format_value("speed_per_s", 3) == "3/s"  # not seconds: a rate
    assert format_value("change_ratio", 2.0) == "2×"
    assert format_value("used_pct", 50) == "50.0 %"
    assert formatting.format_value(declared, None) == MISSING


@pytest.mark.parametrize(
    "name,text",
    [
        ("peak_bytes", "peak"),
        ("used_pct", "used"),
        ("change_ratio", "change"),
        ("wall_time_s", "wall time"),
        ("items_per_s", "items per s"),  # a rate keeps its unit
        ("n_loras", "loras (count)"),
        ("n_keys_bytes", "keys (count)"),
        ("_bytes", " bytes"),  # nothing but a suffix: kept
        ("_s", " s"),
        ("n_", "n "),  # no name after n_
        ("n_x", "x (count)"),
        ("status", "status"),
        ("total_size_bytes_s", "total size bytes"),  # one suffix only
    ],
)
def test_labels_of_keys_no_kind_declares(name, text):
    assert label_from_key(name) == text


@pytest.mark.parametrize(("seconds", "text"), [(0.009949, "9.9 ms"), (0.4994, "499 ms"), (-0.4994, "-499 ms")])
def test_milliseconds_are_a_thousand_per_second_to_the_last_digit(seconds, text):
    assert format_seconds(seconds) == text


def test_a_rate_a_ratio_and_a_lists_numbers_have_four_significant_digits_as_in_the_panel():
    """The same texts as web/lib/format.mjs (tests/js/format.test.mjs): the node's text and its card agree."""
    assert format_value("frames_per_s", 0.037853) == "0.03785/s"
    assert format_value("overhead_ratio", 2.0594) == "2.059×"
    assert format_value("values", [0.929183, 1024, None]) == "[0.9292, 1024, null]"
