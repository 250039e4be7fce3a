"""scripts/mutate.py on a toy repository: each kind of mutation is made, the tests kill what they
check, what they do not check survives and is listed, and the toy's own files are left as they were."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SPEC = importlib.util.spec_from_file_location("mutate_tool", REPO / "scripts" / "mutate.py")
mutate = importlib.util.module_from_spec(SPEC)
sys.modules.setdefault("mutate_tool", mutate)  # dataclasses look their module up there
SPEC.loader.exec_module(mutate)

TOY = '''"""A toy."""
import logging

log = logging.getLogger(__name__)
LIMIT: int = 10


def add(a: int, b: int) -> int:
    return a + b


def clamp(x):
    if x > LIMIT:
        log.info("clamped at %d", 10)
        return LIMIT
    return x


def both(a, b):
    return a and b


def total(values):
    out = 0
    for v in values:
        out += v
    return out


def unchecked(x):
    return x * 2
'''

TOY_TESTS = """from toy.calc import add, both, clamp, total


def test_add():
    assert add(2, 3) == 5


def test_clamp():
    assert clamp(11) == 10 and clamp(3) == 3 and clamp(10) == 10


def test_both():
    assert both(True, False) is False


def test_total():
    assert total([1, 2, 3]) == 6
"""


def test_mutants_cover_each_kind_and_skip_logging_and_annotations():
    found = {(m.line, m.kind, m.description.split(" in ")[0]) for m in mutate.mutants_of(TOY)}
    assert found == {
        (5, "constant", "`10` -> `11`"),
        (9, "binop", "`+` -> `-`"),
        (9, "return", "`return ...` -> `return None`"),
        (13, "compare", "`>` -> `>=`"),
        (13, "compare", "`>` -> `<=`"),
        (15, "return", "`return ...` -> `return None`"),
        (16, "return", "`return ...` -> `return None`"),
        (20, "boolop", "`and` -> `or`"),
        (20, "return", "`return ...` -> `return None`"),
        (24, "constant", "`0` -> `1`"),
        (26, "augassign", "`+=` -> `-=`"),
        (27, "return", "`return ...` -> `return None`"),
        (31, "binop", "`*` -> `/`"),
        (31, "constant", "`2` -> `3`"),
        (31, "return", "`return ...` -> `return None`"),
    }


def test_mutated_source_changes_exactly_one_point():
    mutants = mutate.mutants_of(TOY)
    [plus] = [m for m in mutants if m.kind == "binop" and m.line == 9]
    source = mutate.mutated_source(TOY, plus)
    assert "return a - b" in source and "x * 2" in source and "LIMIT: int = 10" in source


@pytest.fixture
def toy_repo(tmp_path):
    (tmp_path / "toy").mkdir()
    (tmp_path / "toy" / "__init__.py").write_text("")
    (tmp_path / "toy" / "calc.py").write_text(TOY)
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_calc.py").write_text(TOY_TESTS)
    return tmp_path


def run_mutate(root, module: str, test_file: str, *extra: str):
    """scripts/mutate.py on `module` of the toy repository at `root`: (the finished process, the
    module's row of its JSON result)."""
    out_json = root / "result.json"
    command = [sys.executable, str(REPO / "scripts" / "mutate.py"), module, "--root", str(root)]
    command += ["--tests", test_file, "--preimport", mutate.PYTEST_PLUGINS, *extra, "--json", str(out_json)]
    done = subprocess.run(command, capture_output=True, text=True, cwd=root)
    assert done.returncode == 0, done.stderr[-3000:]
    [row] = json.loads(out_json.read_text())
    return done, row


def test_kills_what_the_tests_check_and_lists_the_survivors(toy_repo, tmp_path):
    done, row = run_mutate(toy_repo, "toy/calc.py", "tests/test_calc.py")
    survivors = {(s["line"], s["description"].split(" in ")[0], s["outcome"]) for s in row["survivors"]}
    # `unchecked` is never called: its three mutants survive without a run; `and` -> `or` on
    # (True, False) gives True, which the test sees; 10 -> 11 for LIMIT breaks clamp(11).
    assert survivors == {
        (13, "`>` -> `>=`", "survived"),  # clamp(10) is 10 either way: an equivalent mutant
        (31, "`*` -> `/`", "not covered"),
        (31, "`2` -> `3`", "not covered"),
        (31, "`return ...` -> `return None`", "not covered"),
    }
    assert (row["total"], row["killed"], row["survived"], row["not_covered"]) == (15, 11, 1, 3)
    assert "toy/calc.py: 15 mutants, 11 killed" in done.stdout
    assert "toy/calc.py:13: [compare] `>` -> `>=`" in done.stdout
    assert (toy_repo / "toy" / "calc.py").read_text() == TOY  # the copy was mutated, never the original


def test_lines_runs_only_the_mutants_on_those_lines(toy_repo, tmp_path):
    _, row = run_mutate(toy_repo, "toy/calc.py", "tests/test_calc.py", "--lines", "13", "31")
    assert {s["line"] for s in row["survivors"]} == {13, 31}
    assert (row["total"], row["killed"], row["survived"], row["not_covered"]) == (5, 1, 1, 3)
    listed = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "mutate.py"), "toy/calc.py", "--root", str(toy_repo)]
        + ["--list", "--lines", "9"],
        capture_output=True,
        text=True,
    )
    assert sorted(listed.stdout.splitlines()) == [
        "toy/calc.py:9: [binop] `+` -> `-` in `return a + b`",
        "toy/calc.py:9: [return] `return ...` -> `return None` in `return a + b`",
    ]


def test_a_mutant_that_breaks_the_conftests_import_is_killed(tmp_path):
    """No test can even start (pytest exits 4 where its conftest fails to import): the tests
    noticed, as loudly as they can."""
    (tmp_path / "toy").mkdir()
    (tmp_path / "toy" / "__init__.py").write_text("")
    (tmp_path / "toy" / "table.py").write_text('def names():\n    return ["a", "b"]\n\n\nNAMES = tuple(names())\n')
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "conftest.py").write_text("import toy.table  # noqa: F401\n")
    (tmp_path / "tests" / "test_table.py").write_text(
        'from toy.table import NAMES\n\n\ndef test_names():\n    assert NAMES == ("a", "b")\n'
    )
    _, row = run_mutate(tmp_path, "toy/table.py", "tests/test_table.py")
    assert (row["total"], row["killed"], row["error"], row["survivors"]) == (1, 1, 0, [])


SWAPPY = '''import statistics


def needed(before, after):
    return after["memory_allocated"] - before.memory_allocated


def span(values, mean_s):
    low, high = min(values), max(values)
    return {"max_bytes": high - low, "typical": statistics.median(values), "meaning": mean_s}


def ratio(a, b):
    return divide(a, b) + isinstance(a, int) + divide(a, a)


def divide(a, b):
    return a / b
'''


def test_the_swap_operator_swaps_confusable_names_and_two_arguments():
    found = {
        (m.line, m.description.split(" in ")[0])
        for m in mutate.mutants_of(SWAPPY, operators=("swap",))
    }
    assert found == {
        (5, "swap string 'memory_allocated' -> 'memory_reserved'"),
        (5, "swap attribute `.memory_allocated` -> `.memory_reserved`"),
        (9, "swap name `min` -> `max`"),
        (9, "swap name `max` -> `min`"),
        (10, "swap string 'max_bytes' -> 'min_bytes'"),
        (10, "swap attribute `.median` -> `.mean`"),
        # `mean_s` -> `median_s` would be a NameError, `meaning` is another word
        (14, "swap arguments 1 and 2"),  # not isinstance(int, a), not divide(a, a) twice
    }
    assert all(m.kind == "swap" for m in mutate.mutants_of(SWAPPY, operators=("swap",)))
    [swapped] = [m for m in mutate.mutants_of(SWAPPY, operators=("swap",)) if m.line == 14]
    assert "divide(b, a) + isinstance(a, int) + divide(a, a)" in mutate.mutated_source(
        SWAPPY, swapped, operators=("swap",)
    )
    keywords = "stats.update(min=1, max=2)\nreport(minimum=1)\n"  # min= -> max= would not compile
    assert [m.description.split(" in ")[0] for m in mutate.mutants_of(keywords, operators=("swap",))] == [
        "swap keyword `minimum=` -> `maximum=` (line 2)"
    ]
    classic = {m.kind for m in mutate.mutants_of(SWAPPY, operators=("classic",))}
    assert "swap" not in classic and "binop" in classic


def test_the_swap_operator_kills_a_reserved_for_allocated_reading(tmp_path):
    (tmp_path / "toy").mkdir()
    (tmp_path / "toy" / "__init__.py").write_text("")
    (tmp_path / "toy" / "mem.py").write_text(
        'def needed(before, after):\n    return after["allocated"] - before["allocated"]\n'
    )
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_mem.py").write_text(
        "from toy.mem import needed\n\n\ndef test_needed():\n"
        '    assert needed({"allocated": 1, "reserved": 2}, {"allocated": 3, "reserved": 5}) == 2\n'
    )
    _, row = run_mutate(tmp_path, "toy/mem.py", "tests/test_mem.py", "--operators", "swap")
    assert (row["total"], row["killed"], row["survivors"]) == (2, 2, [])


def test_a_mutation_inside_a_literal_over_several_lines_is_run_with_its_statement(tmp_path):
    """Coverage records a statement on its first line only: a constant on a later line of a tuple
    is executed with its statement's first line, not "not covered"."""
    (tmp_path / "toy").mkdir()
    (tmp_path / "toy" / "__init__.py").write_text("")
    source = 'PAIRS = (\n    ("allocated_bytes", 1),\n    ("reserved_bytes", 2),\n)\n'
    (tmp_path / "toy" / "pairs.py").write_text(source)
    [first, *_] = mutate.mutants_of(source, operators=("swap",))
    assert (first.line, first.statement_line) == (2, 1)
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_pairs.py").write_text(
        "from toy.pairs import PAIRS\n\n\ndef test_pairs():\n"
        '    assert dict(PAIRS) == {"allocated_bytes": 1, "reserved_bytes": 2}\n'
    )
    _, row = run_mutate(tmp_path, "toy/pairs.py", "tests/test_pairs.py", "--operators", "swap")
    assert (row["total"], row["killed"], row["not_covered"]) == (2, 2, 0)
