"""Dump names (monitors/dumps/names.py): each refusal says why, the bounds are exact, and a
plain name gets its suffix once."""

from __future__ import annotations

import pytest

from monitors.dumps.names import (
    DumpError,
    DumpNameError,
    check_file_name,
    dump_file_name,
    is_safe_file_name,
    name_problem,
)


@pytest.mark.parametrize(
    "name,problem",
    [
        (3, "must be text, not int"),
        (None, "must be text, not NoneType"),
        ("", "is empty"),
        ("a\x00b", "contains a NUL byte"),
        ("a/b", "contains a path separator"),
        ("a\\b", "contains a path separator"),
        ("a..b", "contains '..'"),
        ("c:x", "contains ':' (drive letter or stream)"),
        ("a" * 161, "is longer than 160 characters"),
        ("a b", "has characters other than letters, digits, '.', '_' and '-'"),
        ("é", "has characters other than letters, digits, '.', '_' and '-'"),
        (".hidden", "starts with '.' or '-'"),
        ("-rf", "starts with '.' or '-'"),
        ("name.", "ends with '.'"),
        ("CON", "is a reserved device name on Windows (CON)"),
        ("nul.txt", "is a reserved device name on Windows (nul)"),
        ("com0", "is a reserved device name on Windows (com0)"),
        ("LPT9.x", "is a reserved device name on Windows (LPT9)"),
        ("CLOCK$", "has characters other than letters, digits, '.', '_' and '-'"),
    ],
)
def test_each_refusal_says_why(name, problem):
    assert name_problem(name) == problem
    assert is_safe_file_name(name) is False
    with pytest.raises(DumpNameError) as info:
        check_file_name(name)
    assert f"it {problem}." in str(info.value)


@pytest.mark.parametrize(
    "name", ["a", "my_latent", "A-1.b_2", "a" * 160, "COM10", "LPT10", "LPT", "console", "a-", "x.CON"]
)
def test_plain_names_pass_unchanged(name):
    assert name_problem(name) is None
    assert is_safe_file_name(name) is True
    assert check_file_name(name) == name


def test_a_refused_name_is_shown_shortened_and_the_error_is_a_dump_error():
    with pytest.raises(DumpError) as info:
        check_file_name("/" + "x" * 200)
    message = str(info.value)
    assert message.startswith("Dump name '/" + "x" * 78 + " refused: it contains a path separator.")
    assert isinstance(info.value, DumpNameError)


def test_dump_file_name_adds_the_suffix_once():
    assert dump_file_name("my_latent") == "my_latent.safetensors"
    assert dump_file_name("my_latent.safetensors") == "my_latent.safetensors"
    assert dump_file_name("a.safetensors.safetensors") == "a.safetensors.safetensors"


def test_dump_names_are_bounded_without_their_suffix():
    longest = "a" * 100  # the suffix and the folder fit in any OS's path limits
    assert dump_file_name(longest) == longest + ".safetensors"
    assert dump_file_name(longest + ".safetensors") == longest + ".safetensors"
    with pytest.raises(DumpNameError, match="longer than 100 characters"):
        dump_file_name(longest + "a")


def test_the_suffix_alone_is_an_empty_name():
    with pytest.raises(DumpNameError, match="it is empty"):
        dump_file_name(".safetensors")
    with pytest.raises(DumpNameError, match="must be text, not bytes"):
        dump_file_name(b"x")
