"""The LoRA step's caches on their own: base norms per module (held weakly, checked against shape
and dtype), LoRA-file figures by file identity (bounded, least recently used dropped first, valid
only for the patch tensors they came from), key coverage per (file, modules), the per-module
answers, and which loader's file each patch entry came from."""

from __future__ import annotations

import gc
import os

import pytest
import torch

from monitors.lora import caches
from monitors.lora.caches import (
    BASE_NORMS,
    FILE_FIGURES,
    BaseNorms,
    CoverageCache,
    FileFigures,
    Reuse,
    entry_files,
    file_identity,
)
from monitors.lora.patches import entry_tensors, patch_signature
from monitors.lora.weights import ModuleAnswers

from .test_lora_norms import Adapter, rand


def lora_entry(seed: int = 0, strength: float = 1.0, offset=None) -> tuple:
    """(strength, adapter, strength_model, offset, function), as ComfyUI keeps a patch."""
    value = Adapter("lora", (rand(8, 2, seed=seed), rand(2, 6, seed=seed + 1), 1.0, None, None, None))
    return (strength, value, 1.0, offset, None)


FILE_A = ("a.safetensors", 10, 1)
FILE_B = ("b.safetensors", 20, 2)
FILE_C = ("c.safetensors", 30, 3)


# -- file identity and patch signature ---------------------------------------------------------


def test_file_identity_is_absolute_path_size_and_mtime(tmp_path, monkeypatch):
    path = tmp_path / "x.safetensors"
    path.write_bytes(b"12345")
    stat = os.stat(path)
    monkeypatch.chdir(tmp_path)
    assert file_identity("x.safetensors") == (str(path), 5, stat.st_mtime_ns)
    path.write_bytes(b"1234567")
    assert file_identity(str(path))[1] == 7


@pytest.mark.parametrize("path", [None, "", "no/such/file.safetensors"])
def test_file_identity_unknown(path):
    assert file_identity(path) is None


def test_patch_signature_names_key_type_offset_and_tensors():
    entry = lora_entry(offset=[0, 2, 4])
    assert patch_signature("w", entry) == (
        "w",
        "lora",
        (0, 2, 4),
        (((8, 2), "torch.float32"), ((2, 6), "torch.float32")),
    )
    no_offset = patch_signature("w", lora_entry()[:3])
    assert no_offset[2] is None and no_offset[1] == "lora"
    assert patch_signature("w", lora_entry()[:4])[2] is None
    assert patch_signature("w", lora_entry(offset=(1, 0, 3))[:4])[2] == (1, 0, 3)  # no function


def test_patch_signature_of_short_entries():
    assert patch_signature("w", (1.0,)) == ("w", "unknown", None, ())
    diff = (torch.ones(3),)
    assert patch_signature("w", (1.0, diff)) == ("w", "diff", None, (((3,), "torch.float32"),))


# -- base norms ----------------------------------------------------------------------------------


def test_base_norms_by_module_key_and_offset_checked_against_shape_and_dtype():
    norms = BaseNorms()
    module, other = torch.nn.Linear(4, 3), torch.nn.Linear(4, 3)
    weight = module.weight
    assert norms.get(module, "w", None, weight) is None
    norms.put(module, "w", None, weight, 2.5)
    norms.put(module, "b", None, module.bias, 0.5)
    norms.put(module, "w", [0, 0, 2], weight, 7.0)
    assert norms.get(module, "w", None, weight) == 2.5
    assert norms.get(module, "w", (), weight) == 2.5  # no offset, however written
    assert norms.get(module, "b", None, module.bias) == 0.5
    assert norms.get(module, "w", (0, 0, 2), weight) == 7.0
    assert norms.get(module, "w", (0, 1, 2), weight) is None
    assert norms.get(other, "w", None, weight) is None
    assert norms.get(module, "w", None, torch.zeros(3, 5)) is None  # another shape
    assert norms.get(module, "w", None, weight.to(torch.float64)) is None  # another dtype
    assert norms.n_models() == 1


def test_base_norms_without_module_are_not_kept():
    norms = BaseNorms()
    weight = torch.ones(2)
    norms.put(None, "w", None, weight, 1.0)
    assert norms.get(None, "w", None, weight) is None
    assert norms.n_models() == 0


def test_base_norms_go_with_their_module():
    norms = BaseNorms()
    kept, dropped = torch.nn.Linear(2, 2), torch.nn.Linear(2, 2)
    norms.put(kept, "w", None, kept.weight, 1.0)
    norms.put(dropped, "w", None, dropped.weight, 2.0)
    assert norms.n_models() == 2
    del dropped
    gc.collect()
    assert norms.n_models() == 1
    norms.clear()
    assert norms.n_models() == 0 and norms.get(kept, "w", None, kept.weight) is None


# -- file figures ----------------------------------------------------------------------------


def test_unit_norms_by_file_and_signature():
    figures = FileFigures()
    tensors = [torch.ones(2), torch.ones(3)]
    assert figures.unit_norm(FILE_A, ("s",), tensors) is None
    figures.put_unit_norm(FILE_A, ("s",), tensors, 3.0)
    figures.put_unit_norm(FILE_A, ("t",), tensors, 4.0)
    assert figures.unit_norm(FILE_A, ("s",), tensors) == 3.0
    assert figures.unit_norm(FILE_A, ("t",), tensors) == 4.0
    assert figures.unit_norm(FILE_B, ("s",), tensors) is None
    assert figures.unit_norm(None, ("s",), tensors) is None
    assert figures.stats() == {"n_files": 1, "n_file_pairs": 0}


def test_unknown_files_and_figures_are_not_kept():
    figures = FileFigures()
    figures.put_unit_norm(None, ("s",), [], 1.0)
    figures.put_unit_norm(FILE_A, ("s",), [], None)
    figures.put_inner((FILE_A, None), ("s", "t"), [], 1.0)
    figures.put_inner((FILE_A, FILE_B), ("s", "t"), [], None)
    assert figures.stats() == {"n_files": 0, "n_file_pairs": 0}
    assert figures.inner((None, FILE_A), ("s", "t"), []) is None


def test_reading_an_unknown_file_keeps_nothing_and_drops_nothing():
    figures = FileFigures(max_files=1, max_pairs=1)
    figures.put_unit_norm(FILE_A, ("s",), [], 1.0)
    figures.put_inner((FILE_A, FILE_B), ("s", "t"), [], 2.0)
    assert figures.unit_norm(FILE_B, ("s",), []) is None
    assert figures.inner((FILE_A, FILE_C), ("s", "t"), []) is None
    assert figures.stats() == {"n_files": 1, "n_file_pairs": 1}
    assert figures.unit_norm(FILE_A, ("s",), []) == 1.0
    assert figures.inner((FILE_A, FILE_B), ("s", "t"), []) == 2.0


def test_files_bound_drops_the_least_recently_used():
    figures = FileFigures(max_files=2)
    figures.put_unit_norm(FILE_A, ("s",), [], 1.0)
    figures.put_unit_norm(FILE_B, ("s",), [], 2.0)
    assert figures.stats()["n_files"] == 2
    assert figures.unit_norm(FILE_A, ("s",), []) == 1.0  # A used: B is now the oldest
    figures.put_unit_norm(FILE_C, ("s",), [], 3.0)
    assert figures.stats()["n_files"] == 2
    assert figures.unit_norm(FILE_B, ("s",), []) is None
    assert figures.unit_norm(FILE_A, ("s",), []) == 1.0
    assert figures.unit_norm(FILE_C, ("s",), []) == 3.0


def test_pairs_bound_drops_the_least_recently_used():
    figures = FileFigures(max_pairs=2)
    figures.put_inner((FILE_A, FILE_B), ("s", "t"), [], 1.0)
    figures.put_inner((FILE_A, FILE_C), ("s", "t"), [], 2.0)
    assert figures.inner((FILE_A, FILE_B), ("s", "t"), []) == 1.0
    figures.put_inner((FILE_B, FILE_C), ("s", "t"), [], 3.0)
    assert figures.stats()["n_file_pairs"] == 2
    assert figures.inner((FILE_A, FILE_C), ("s", "t"), []) is None
    assert figures.inner((FILE_A, FILE_B), ("s", "t"), []) == 1.0
    assert figures.inner((FILE_B, FILE_C), ("s", "t"), []) == 3.0


def test_inner_products_are_order_free():
    figures = FileFigures()
    figures.put_inner((FILE_B, FILE_A), ("sb", "sa"), [], 5.0)
    assert figures.inner((FILE_A, FILE_B), ("sa", "sb"), []) == 5.0
    assert figures.inner((FILE_B, FILE_A), ("sb", "sa"), []) == 5.0
    assert figures.inner((FILE_A, FILE_B), ("sb", "sa"), []) is None  # signatures go with their file
    figures.put_inner((FILE_A, FILE_B), ("sx", "sy"), [], 6.0)
    assert figures.stats()["n_file_pairs"] == 1
    figures.clear()
    assert figures.stats() == {"n_files": 0, "n_file_pairs": 0}
    assert figures.inner((FILE_A, FILE_B), ("sa", "sb"), []) is None


def test_a_figure_is_valid_for_its_own_tensors_or_once_they_are_all_gone():
    figures = FileFigures()
    mine = [torch.ones(2), torch.ones(3)]
    figures.put_unit_norm(FILE_A, ("s",), mine, 3.0)
    assert figures.unit_norm(FILE_A, ("s",), mine) == 3.0
    others = [torch.ones(2), torch.ones(3)]
    assert figures.unit_norm(FILE_A, ("s",), others) is None  # another copy while mine live
    assert figures.unit_norm(FILE_A, ("s",), mine[:1]) is None
    assert figures.unit_norm(FILE_A, ("s",), [mine[0], others[1]]) is None
    del mine[1]
    gc.collect()
    assert figures.unit_norm(FILE_A, ("s",), [mine[0], others[1]]) is None  # one still alive
    del mine[0]
    gc.collect()
    assert figures.unit_norm(FILE_A, ("s",), others) == 3.0  # the file read again


def test_an_inner_product_is_valid_for_its_own_tensors():
    figures = FileFigures()
    mine = [torch.ones(2), torch.ones(2)]
    figures.put_inner((FILE_A, FILE_B), ("s", "t"), mine, 4.0)
    assert figures.inner((FILE_A, FILE_B), ("s", "t"), mine) == 4.0
    assert figures.inner((FILE_A, FILE_B), ("s", "t"), [torch.ones(2), torch.ones(2)]) is None


def test_the_default_caches_are_the_shared_ones():
    reuse = Reuse()
    assert reuse.base_norms is BASE_NORMS and reuse.files is FILE_FIGURES
    assert reuse.file_of(lora_entry()) is None
    own_norms, own_files = BaseNorms(), FileFigures()
    reuse = Reuse(base_norms=own_norms, files=own_files)
    assert reuse.base_norms is own_norms and reuse.files is own_files


# -- one side's reuse ----------------------------------------------------------------------------


def test_reuse_of_unit_norms_counted():
    entry, stranger = lora_entry(seed=0), lora_entry(seed=0)
    reuse = Reuse(files_by_entry={id(entry): FILE_A, id(stranger): FILE_A}, files=FileFigures())
    assert reuse.to_dict() == {
        **dict.fromkeys(caches.COUNTS, 0),
        "n_entries_with_file": 2,
        "files": ["a.safetensors"],
    }
    assert reuse.unit_norm("w", entry) is None
    reuse.put_unit_norm("w", entry, 2.0)
    assert reuse.unit_norm("w", entry) == 2.0
    assert reuse.unit_norm("w", stranger) is None  # same signature, other tensors alive
    assert reuse.unit_norm("v", entry) is None  # another key
    counts = reuse.to_dict()
    assert counts["n_delta_norms_computed"] == 3 and counts["n_delta_norms_reused"] == 1
    assert counts["n_inner_products_computed"] == 0 and counts["n_base_norms_reused"] == 0


def test_an_entry_without_file_is_neither_looked_up_nor_counted():
    entry = lora_entry()
    reuse = Reuse(files=FileFigures())
    assert reuse.unit_norm("w", entry) is None
    reuse.put_unit_norm("w", entry, 2.0)
    assert reuse.files.stats()["n_files"] == 0
    assert reuse.inner("w", entry, entry) == (None, None)
    assert reuse.to_dict() == {**dict.fromkeys(caches.COUNTS, 0), "n_entries_with_file": 0, "files": []}


def test_reuse_of_inner_products_counted():
    a, b, half = lora_entry(seed=0), lora_entry(seed=2), lora_entry(seed=4)
    reuse = Reuse(files_by_entry={id(a): FILE_A, id(b): FILE_B}, files=FileFigures())
    assert reuse.inner("w", a, half) == (None, None)  # one side without a file
    found, store = reuse.inner("w", a, b)
    assert found is None
    store(9.0)
    assert reuse.inner("w", a, b) == (9.0, None)
    b_again = lora_entry(seed=2)  # b's signature, other tensors while b's live
    reuse.files_by_entry[id(b_again)] = FILE_B
    assert reuse.inner("w", a, b_again)[0] is None
    counts = reuse.to_dict()
    assert counts["n_inner_products_reused"] == 1 and counts["n_inner_products_computed"] == 2
    assert counts["files"] == ["a.safetensors", "b.safetensors"]


def test_an_inner_product_stored_in_one_order_is_found_in_the_other_while_its_tensors_live():
    a, b = lora_entry(seed=0), lora_entry(seed=2, offset=(0, 0, 8))
    reuse = Reuse(files_by_entry={id(a): FILE_A, id(b): FILE_B}, files=FileFigures())
    _, store = reuse.inner("w", b, a)
    store(9.0)
    assert reuse.inner("w", a, b) == (9.0, None) and reuse.inner("w", b, a) == (9.0, None)
    # Stored under each file's own signature, with each side's tensors.
    signature_a, signature_b = patch_signature("w", a), patch_signature("w", b)
    tensors = entry_tensors(a) + entry_tensors(b)
    assert reuse.files.inner((FILE_A, FILE_B), (signature_a, signature_b), tensors) == 9.0
    for side in (a, b):  # a side's file and signature, other tensors while the first ones live
        other = lora_entry(seed=5, offset=side[3])
        reuse.files_by_entry[id(other)] = reuse.files_by_entry[id(side)]
        assert reuse.inner("w", other, b if side is a else a)[0] is None


def test_reuse_of_an_entry_without_tensors():
    entry = (1.0,)
    reuse = Reuse(files_by_entry={id(entry): FILE_A}, files=FileFigures())
    reuse.put_unit_norm("w", entry, 1.5)
    assert reuse.unit_norm("w", entry) == 1.5


# -- key coverage --------------------------------------------------------------------------------


def test_coverage_by_file_and_modules_stored_as_it_was_and_served_without_a_deep_copy():
    cache = CoverageCache()
    module, other = torch.nn.Linear(2, 2), torch.nn.Linear(2, 2)
    coverage = {"n_keys": 3, "missing": ["x"]}
    cache.put(FILE_A, (None, module), coverage)
    coverage["missing"].append("y")  # the caller's value goes on living its own life
    found = cache.get(FILE_A, (None, module))
    assert found == {"n_keys": 3, "missing": ["x"]}
    found["n_keys"] = 4  # a caller may set a key of what it got
    again = cache.get(FILE_A, (None, module))
    assert again == {"n_keys": 3, "missing": ["x"]}
    assert again["missing"] is found["missing"]  # nested values are shared, read-only: no deep copy
    assert cache.get(FILE_A, (None, other)) is None
    assert cache.get(FILE_A, (module, None)) is None
    assert cache.get(FILE_B, (None, module)) is None
    assert cache.get(None, (None, module)) is None
    cache.clear()
    assert cache.get(FILE_A, (None, module)) is None


def test_coverage_of_an_unknown_file_is_not_kept():
    cache = CoverageCache()
    cache.put(None, (), {"n_keys": 1})
    assert cache._entries == {}


def test_coverage_module_checked_beyond_its_id():
    module = torch.nn.Linear(2, 2)
    assert caches._same(None, None) and not caches._same(None, module)
    ref = torch.utils.weak.weakref.ref(module)
    assert caches._same(ref, module) and not caches._same(ref, torch.nn.Linear(2, 2))
    cache = CoverageCache()
    cache.put(FILE_A, (module,), {"n": 1})
    key = next(iter(cache._entries))
    refs, coverage = cache._entries[key]
    cache._entries[key] = ((torch.utils.weak.weakref.ref(torch.nn.Linear(2, 2)),), coverage)
    assert cache.get(FILE_A, (module,)) is None  # another module at the same id


def test_coverage_bound_drops_the_oldest():
    cache = CoverageCache(max_entries=2)
    for i, file in enumerate((FILE_A, FILE_B, FILE_C)):
        cache.put(file, (), {"n": i})
    assert cache.get(FILE_A, ()) is None
    assert cache.get(FILE_B, ()) == {"n": 1} and cache.get(FILE_C, ()) == {"n": 2}


# -- per-module answers --------------------------------------------------------------------------


def test_module_answers_kept_per_module_and_dropped_with_it():
    answers = ModuleAnswers()
    module, other = torch.nn.Linear(2, 2), torch.nn.Linear(2, 2)
    assert answers.answers(None) is None
    assert answers.answers(7) is None  # cannot be held weakly
    mine = answers.answers(module)
    assert mine == {}
    mine["rule"] = "x"
    assert answers.answers(module) == {"rule": "x"}
    assert answers.answers(other) == {}
    assert len(answers._by_module) == 2
    del other
    gc.collect()
    assert len(answers._by_module) == 1
    answers.clear()
    assert answers.answers(module) == {}


# -- which loader's file each entry came from ---------------------------------------------------


class Hop:
    def __init__(self, uuid):
        self.patches_uuid = uuid


def hops(*uuids):
    """(child, parent) pairs of a chain of patchers with these patch uuids, the first the base."""
    patchers = [Hop(u) for u in uuids]
    return [(patchers[i + 1], patchers[i]) for i in range(len(patchers) - 1)]


def test_entry_files_pairs_patching_hops_with_their_loaders():
    a, b = lora_entry(strength=0.5), lora_entry(strength=0.25)
    pairs = hops("u0", "u1", "u1", "u2")  # the middle hop patches nothing
    added = [{"w": [a]}, {}, {"w": [b]}]
    found = entry_files(pairs, added, [(FILE_A, 0.5), (FILE_B, 0.25)])
    assert found == {id(a): FILE_A, id(b): FILE_B}


def test_entry_files_a_hop_with_new_patches_but_none_added_counts():
    a = lora_entry(strength=0.5)
    pairs = hops("u0", "u1", "u2")  # the second hop changed its patches without adding keys
    assert entry_files(pairs, [{"w": [a]}, {}], [(FILE_A, 0.5), (FILE_B, 1.0)]) == {id(a): FILE_A}
    assert entry_files(pairs, [{"w": [a]}, {}], [(FILE_A, 0.5)]) == {}


def test_entry_files_nothing_when_doubtful():
    a = lora_entry(strength=0.5)
    pairs = hops("u0", "u1")
    assert entry_files(pairs, [{"w": [a]}], []) == {}
    assert entry_files(pairs, [{"w": [a]}], None) == {}
    assert entry_files(pairs, [{"w": [a]}], [(FILE_A, 0.5), (FILE_B, 1.0)]) == {}
    assert entry_files(pairs, [{"w": [a]}], [(FILE_A, 0.75)]) == {}  # not the loader's strength
    assert entry_files(pairs, [{"w": [("x",) + a[1:]]}], [(FILE_A, 0.5)]) == {}
    assert entry_files(pairs, [{"w": [a]}], [(FILE_A, None)]) == {id(a): FILE_A}  # strength unknown
    assert entry_files(pairs, [{"w": [a]}], [(None, 0.5)]) == {}  # file unknown


def test_entry_files_a_wrong_strength_anywhere_drops_all():
    a, b = lora_entry(strength=0.5), lora_entry(strength=0.3)
    pairs = hops("u0", "u1")
    assert entry_files(pairs, [{"w": [a], "v": [b]}], [(FILE_A, 0.5)]) == {}


# -- LoRA file headers -------------------------------------------------------------------------


def test_file_statuses_by_identity_served_without_a_deep_copy_bounded():
    statuses = caches.FileStatuses(max_files=2)
    index = {"w": "tensor index"}
    status = {"status": "ok", "keys": ["w"]}
    assert statuses.get(None) is None and statuses.get(FILE_A) is None
    statuses.put(FILE_A, status, index)
    status["keys"].append("changed later")
    found, found_index = statuses.get(FILE_A)
    assert found == {"status": "ok", "keys": ["w"]} and found_index is index
    found["status"] = "renamed by a caller"  # its own top-level dict
    again = statuses.get(FILE_A)[0]
    assert again == {"status": "ok", "keys": ["w"]} and again["keys"] is found["keys"]  # shared, read-only
    statuses.put(FILE_B, {"status": "error"}, None)  # an unreadable header is looked at again
    statuses.put(None, {"status": "ok"}, {})
    assert statuses.get(FILE_B) is None
    statuses.put(FILE_B, {"status": "ok"}, {})
    assert statuses.get(FILE_A) is not None  # A used: B is now the oldest
    statuses.put(FILE_C, {"status": "ok"}, {})
    assert (
        statuses.get(FILE_B) is None and statuses.get(FILE_A) is not None and statuses.get(FILE_C) is not None
    )
    statuses.put(FILE_A, {"status": "again"}, {})  # put again: the newest
    statuses.put(FILE_B, {"status": "ok"}, {})
    assert statuses.get(FILE_C) is None and statuses.get(FILE_A)[0] == {"status": "again"}
    statuses.clear()
    assert statuses.get(FILE_A) is None
