"""The benches that need a ComfyUI checkout, in --quick mode: they run and end with their verdict
lines (no timing asserted). Skipped without COMFYUI_PATH, like every test here."""

from __future__ import annotations

import pytest

from tests.unit.test_bench_quick import NEEDS_COMFYUI, run_quick


@pytest.mark.bench
@pytest.mark.parametrize("name", sorted(NEEDS_COMFYUI))
def test_quick_run_ends_with_its_verdicts(name, server):
    # The full-size bench generates ~2 GB of models: it shares the session server's base folder,
    # where tests/comfyui/test_full_size_pipeline.py finds them made already (or makes them once).
    args = ("--base", str(server.base)) if name in ("full_size_pipeline", "lora_step_profile", "lora_first_file") else ()
    run_quick(name, args=args)


@pytest.mark.bench
def test_monitor_nodes_quick_run_ends_with_its_verdict(server):
    verdicts = run_quick("monitor_nodes")
    assert any("monitor nodes <= 1 %" in line for line in verdicts), verdicts
