"""No wall-clock thresholds in tests: a timing compared with a number flakes on a loaded machine and
proves nothing about a fast one. Speed lives in bench/ (ratios measured side by side in one run);
tests assert behaviour, with fake clocks where a duration matters, and hang watchdogs (60 s or
more) as timeouts, never as assertions.

An ordering comparison (<, <=, >, >=) inside an `assert` is a timed assertion when one side reads
a clock or a measured duration and the other side is anything but the literal 0 (`duration_s > 0`
says a duration was measured; `elapsed < 5` says a machine was fast enough). A comparison of two
durations from one clock that holds by construction (a span contains the spans nested in it) may
stay, with `# one clock: <why>` on its line."""

from __future__ import annotations

import ast
import os
import re

TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
THIS = os.path.abspath(__file__)

TIMED = re.compile(
    r"elapsed|duration|overhead|per_call|seconds|perf_counter|monotonic|time\(\)|took|"
    r"_ns\b|_us\b|_ms\b|\w_s\b"
)
# Not measurements: a metric's sample count, and settings (intervals, timeouts) read from a config.
NOT_MEASURED = re.compile(r"\w*(_count|interval_s|timeout_s)\b")
ALLOW = re.compile(r"#\s*one clock:\s*\S")
ORDERING = (ast.Lt, ast.LtE, ast.Gt, ast.GtE)


def is_zero(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and not isinstance(node.value, bool) and node.value == 0


def is_count(node: ast.AST) -> bool:
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "len"


def timed_comparisons(source: str) -> list[tuple[int, str]]:
    """(line, source) of each ordering comparison in an assert that bounds a timing."""
    tree = ast.parse(source)
    lines = source.splitlines()
    found = []
    for statement in ast.walk(tree):
        if not isinstance(statement, ast.Assert):
            continue
        for compare in ast.walk(statement.test):
            if not isinstance(compare, ast.Compare):
                continue
            operands = [compare.left, *compare.comparators]
            for op, left, right in zip(compare.ops, operands, operands[1:], strict=False):
                if not isinstance(op, ORDERING) or any(is_zero(n) or is_count(n) for n in (left, right)):
                    continue
                text = f"{ast.get_source_segment(source, left)} {ast.get_source_segment(source, right)}"
                if not TIMED.search(NOT_MEASURED.sub("", text)):
                    continue
                span = lines[compare.lineno - 1 : compare.end_lineno]
                if any(ALLOW.search(line) for line in span):
                    continue
                found.append((compare.lineno, " ".join(s.strip() for s in span)))
                break
    return sorted(set(found))


def test_scanner_flags_thresholds_and_lets_behaviour_pass():
    # Written as "<A> ..." so that a plain grep of tests/ for timed asserts finds none here.
    flagged = [
        "<A> time.perf_counter() - started < 5",
        "<A> elapsed_s <= 2.0, 'too slow'",
        "<A> result.duration_s >= 0.01",
        "<A> overhead_ns < 1000",
        "<A> x == 1 and (\n    steps['min_s'] >= 0.03\n)",
        "<A> 0.04 <= peak.at_s <= result.duration_s",
    ]
    for source in flagged:
        source = source.replace("<A>", "assert")
        assert timed_comparisons(source), source
    passing = [
        "<A> row['duration_s'] > 0",
        "<A> result.duration_s >= 0 and count < 5",
        "<A> denoise_s >= total_s  # one clock: a span contains its nested spans",
        "<A> result.duration_s == pytest.approx(0.05)",
        "<A> len(samples['t_s']) >= 2",
        "<A> grew('node_duration_seconds_count') >= 1",
        "<A> config.sampling.gpu_interval_s < 0.5",
    ]
    for source in passing:
        source = source.replace("<A>", "assert")
        assert not timed_comparisons(source), source


def test_no_timed_assertion_in_tests():
    offenders = []
    for root, dirs, files in os.walk(TESTS):
        dirs[:] = [d for d in dirs if d not in ("__pycache__", "node_modules")]
        for name in files:
            path = os.path.join(root, name)
            if not name.endswith(".py") or os.path.abspath(path) == THIS:
                continue
            with open(path, encoding="utf-8") as f:
                source = f.read()
            offenders += [
                f"{os.path.relpath(path, TESTS)}:{line}: {text}" for line, text in timed_comparisons(source)
            ]
    assert offenders == [], "timed assertions (move the figure to bench/):\n" + "\n".join(offenders)
