"""What was loaded when a step ran out of memory (monitors/models/loaded.py) with stand-in loaded
models and a stand-in CUDA allocator: rows, their bound and total, reasons for what is unknown."""

from __future__ import annotations

import types

import torch

from monitors.models.loaded import (
    MAX_MODELS_LISTED,
    allocator_state,
    loaded_model_row,
    loaded_models_snapshot,
    value_or_reason,
)


def broken():
    raise RuntimeError("freed")


def loaded(patcher=None, loaded_bytes=10, device="cuda:0"):
    return types.SimpleNamespace(
        model=patcher,
        device=device,
        model_loaded_memory=(lambda: loaded_bytes) if loaded_bytes != "broken" else broken,
        model_memory=lambda: 30.0,
    )


def test_value_or_reason():
    assert value_or_reason(lambda: 5.9) == (5, None)
    assert value_or_reason(broken) == (None, "RuntimeError: freed")
    assert value_or_reason(lambda: "5") == (None, "not a number: str")


def test_a_freed_model_has_no_patcher_class_or_manager():
    row = loaded_model_row(loaded(None))
    assert row["patcher_class"] is None and row["memory_manager"] is None and row["total_bytes"] == 30
    patcher = types.SimpleNamespace(model=torch.nn.Linear(1, 1))
    row = loaded_model_row(loaded(patcher))
    assert row["patcher_class"] == "SimpleNamespace" and row["model_class"] == "Linear"
    assert row["memory_manager"] == "estimate"


def test_the_snapshot_lists_twenty_and_totals_every_known_size():
    models = [loaded(loaded_bytes=1) for _ in range(MAX_MODELS_LISTED)] + [loaded(loaded_bytes="broken")]
    snapshot = loaded_models_snapshot(models, torch.device("cpu"), lambda: 7)
    assert snapshot["n_models_loaded"] == 21 and len(snapshot["models"]) == 20 == MAX_MODELS_LISTED
    assert snapshot["loaded_bytes"] == 20  # the unknown size counts as nothing
    assert snapshot["free_bytes"] == 7 and snapshot["device"] == "cpu"
    assert snapshot["allocator"] is None
    assert snapshot["allocator_unknown_reason"] == "no CUDA caching allocator on cpu"


def test_the_allocator_state_on_cuda_only(monkeypatch):
    stats = {"allocated_bytes.all.current": 5, "num_ooms": 2}
    monkeypatch.setattr(torch.cuda, "memory_stats", lambda device: stats)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    state = allocator_state(types.SimpleNamespace(type="cuda"))
    assert state["allocated_bytes_current"] == 5 and state["num_ooms"] == 2
    assert state["reserved_bytes_peak"] is None
    assert allocator_state(types.SimpleNamespace(type="cpu")) is None
    snapshot = loaded_models_snapshot([], types.SimpleNamespace(type="cuda"), lambda: 1)
    assert snapshot["allocator"] == state and snapshot["allocator_unknown_reason"] is None
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert allocator_state(types.SimpleNamespace(type="cuda")) is None
