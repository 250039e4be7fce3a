"""Every bench runs in --quick mode (tiny sizes, 1-2 repeats) and ends with its verdict lines.

Checks that the benches work, not how fast anything is: no timing is asserted, whatever the
verdicts say. The benches that need a ComfyUI checkout are in tests/comfyui/test_bench_quick.py.
The subprocess timeout is a hang watchdog, not a speed limit.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from bench.verdicts import VERDICT, trailing_verdicts

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
WATCHDOG_S = 900
ALL_BENCHES = sorted(
    name[:-3]
    for name in os.listdir(os.path.join(REPO, "bench"))
    if name.endswith(".py") and name not in ("__init__.py", "verdicts.py")
)


def source(name: str) -> str:
    with open(os.path.join(REPO, "bench", f"{name}.py"), encoding="utf-8") as f:
        return f.read()


# Benches that read COMFYUI_PATH need a ComfyUI checkout: tests/comfyui runs them.
NEEDS_COMFYUI = {name for name in ALL_BENCHES if "COMFYUI_PATH" in source(name)}


def run_quick(name: str, env: dict | None = None, args: tuple[str, ...] = ()) -> list[str]:
    proc = subprocess.run(
        [sys.executable, "-m", f"bench.{name}", "--quick", *args],
        cwd=REPO,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=WATCHDOG_S,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    verdicts = trailing_verdicts(proc.stdout)
    assert verdicts, f"bench.{name} does not end with verdict lines:\n{proc.stdout[-3000:]}"
    return verdicts


def test_every_bench_has_a_quick_mode_and_verdict_lines():
    assert {"tensor_stats", "profiling_overhead", "vae_chain"}.issubset(ALL_BENCHES)
    assert "vae_chain" in NEEDS_COMFYUI and "tensor_stats" not in NEEDS_COMFYUI
    for name in ALL_BENCHES:
        text = source(name)
        assert "add_quick_flag(parser)" in text and "verdict_line(" in text, name


@pytest.mark.bench
@pytest.mark.parametrize("name", [n for n in ALL_BENCHES if n not in NEEDS_COMFYUI])
def test_quick_run_ends_with_its_verdicts(name):
    run_quick(name)


def test_trailing_verdicts_reads_only_a_verdict_tail():
    met = "verdict: met | x <= 1 | median 0.5 (min 0.4, max 0.6, 3 pairs)"
    missed = "verdict: not met | y >= 2 | median 1.0"
    assert VERDICT.match(met) and VERDICT.match(missed)
    assert trailing_verdicts(f"table\n{met}\n{missed}\n") == [met, missed]
    assert trailing_verdicts(f"{met}\nwrote out.json\n") == []
    assert trailing_verdicts("no verdicts at all") == []
    assert trailing_verdicts("verdict: PASS | x | y") == []
