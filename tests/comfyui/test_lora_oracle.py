"""ComfyUI as the oracle for every LoRA figure the pack reports.

Each case (tests/comfyui/lora_oracle_support.py) is loaded by ComfyUI's own LoraLoader /
LoraLoaderModelOnly, the pack's PipelineMonitorLora reports on the result, and then ComfyUI patches
the weights for real (ModelPatcher.patch_model on the CPU, undone afterwards). Compared: matched and
unmatched keys against ComfyUI's "lora key not loaded" log, applied or not, the change norm
||W_patched - W_base|| per weight and per patch, relative change, totals, ranks. Tolerance 1e-4
relative. Two architectures: the tiny SD1.5-like UNet + SD1 CLIP, and the tiny WAN 2.1 T2V model.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import math
import re
from pathlib import Path

import pytest
import torch
from lora_oracle_support import Case, cases, truncate_file
from lora_support import run_monitor, write_lora

pytestmark = pytest.mark.comfyui

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"
REL = 1e-4
NOT_LOADED = re.compile(r"^lora key not loaded: (.+)$")
CASES = {case.name: case for case in cases()}
CPU = torch.device("cpu")
ERROR_LEVEL_CASES = {"wan_wrong_shapes_bigger_model", "wan_most_keys_stray"}

# (aspect, case) -> the defect that makes it fail today (strict: it must fail until fixed)
NO_ROWS = {"wan_truncated_file"}  # ComfyUI refuses the file: no patch rows to get wrong
KNOWN_DEFECTS: dict[tuple[str, str], str] = {}


def params(aspect: str, names=None):
    out = []
    for name in names or CASES:
        reason = KNOWN_DEFECTS.get((aspect, name)) or KNOWN_DEFECTS.get((aspect, "*"))
        marks = [pytest.mark.xfail(strict=True, reason=reason)] if reason else []
        out.append(pytest.param(name, marks=marks, id=name))
    return out


@pytest.fixture(scope="module")
def oracle_dir(comfy, tmp_path_factory):
    import folder_paths

    folder = tmp_path_factory.mktemp("oracle_loras")
    folder_paths.add_model_folder_path("loras", str(folder))
    return folder


@pytest.fixture(scope="module")
def wan(comfy, tmp_path_factory):
    import comfy.sd
    from safetensors.torch import save_file

    spec = importlib.util.spec_from_file_location("pm_oracle_tiny_models", SCRIPTS / "make_tiny_models.py")
    tiny_models = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tiny_models)
    path = tmp_path_factory.mktemp("oracle_wan") / "pm_oracle_wan21.safetensors"
    save_file(tiny_models.build_wan(comfy), str(path))
    return comfy.sd.load_diffusion_model(str(path))


def _messages(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records]


def _graph(case: Case) -> dict:
    prompt = {"1": {"class_type": "PMTinyModels" if case.arch == "sd1" else "UNETLoader", "inputs": {}}}
    source = "1"
    for i, f in enumerate(case.files):
        node = str(2 + i)
        inputs = {"model": [source, 0], "lora_name": f.name, "strength_model": f.strength_model}
        if not f.model_only:
            inputs.update(clip=[source, 1], strength_clip=f.strength_clip)
        prompt[node] = {
            "class_type": "LoraLoaderModelOnly" if f.model_only else "LoraLoader",
            "inputs": inputs,
        }
        source = node
    monitor = {"model": [source, 0]}
    if case.arch == "sd1" and not case.files[-1].model_only:
        monitor["clip"] = [source, 1]
    prompt["9"] = {"class_type": "PipelineMonitorLora", "inputs": monitor}
    return prompt


def comfy_patched(patcher, caplog) -> tuple[dict, dict, list[str]]:
    """key -> (base weight, ComfyUI's patched weight) after ModelPatcher.patch_model on the CPU."""
    patcher.unpatch_model(device_to=CPU)
    base = {k: v.detach().clone() for k, v in patcher.model.state_dict().items()}
    caplog.clear()
    patcher.patch_model(device_to=CPU)
    try:
        after = {k: v.detach().clone() for k, v in patcher.model.state_dict().items()}
    finally:
        patcher.unpatch_model(device_to=CPU)
    return base, after, _messages(caplog)


def single_patch_change(base: torch.Tensor, entry, key: str) -> float:
    """||calculate_weight([entry], W) - W||: ComfyUI's own arithmetic for one patch alone."""
    import comfy.lora

    weight = base.float().clone()
    patched = comfy.lora.calculate_weight([entry], weight.clone(), key)
    return float(torch.linalg.vector_norm(patched.double() - base.double()))


RESULTS: dict[str, dict] = {}


@pytest.fixture(scope="module", autouse=True)
def _forget_results():
    yield
    # The cached patchers and weights, freed with the module: kept to interpreter exit, each
    # ModelPatcher.__del__ finds ComfyUI's module globals gone and prints a traceback.
    RESULTS.clear()


@pytest.fixture
def result(request, comfy, tiny, wan, oracle_dir, pack_runtime, caplog):
    """Load, monitor and patch one case (once per case; kept until the module ends)."""
    name = request.param
    if name in RESULTS:
        return RESULTS[name]
    case = CASES[name]
    caplog.set_level(logging.INFO)
    for f in case.files:
        path = write_lora(oracle_dir, f.name, f.sd)
        if f.truncate_bytes:
            truncate_file(path, f.truncate_bytes)
    model = tiny.model if case.arch == "sd1" else wan
    clip = tiny.clip if case.arch == "sd1" else None
    not_loaded, load_error = [], None
    for f in case.files:
        caplog.clear()
        try:
            if f.model_only:
                loader = comfy.nodes.NODE_CLASS_MAPPINGS["LoraLoaderModelOnly"]()
                model = loader.load_lora_model_only(model, f.name, f.strength_model)[0]
            else:
                loader = comfy.nodes.NODE_CLASS_MAPPINGS["LoraLoader"]()
                model, clip = loader.load_lora(model, clip, f.name, f.strength_model, f.strength_clip)
        except Exception as exc:  # a truncated file: ComfyUI refuses it
            load_error = f"{type(exc).__name__}: {exc}"
        not_loaded.append({m.group(1) for m in map(NOT_LOADED.match, _messages(caplog)) if m})
    monitor_clip = clip if "clip" in _graph(case)["9"]["inputs"] else None
    caplog.clear()
    _, step, report = run_monitor(comfy, pack_runtime, _graph(case), model=model, clip=monitor_clip)
    monitor_logs = _messages(caplog)
    sides = {}
    for kind, obj in (("model", model), ("clip", monitor_clip)):
        if obj is None:
            continue
        patcher = obj if kind == "model" else obj.patcher
        base, after, logs = comfy_patched(patcher, caplog)
        sides[kind] = {"patcher": patcher, "base": base, "after": after, "logs": logs}
    RESULTS[name] = {
        "case": case,
        "step": step,
        "report": report.to_dict(),
        "not_loaded": not_loaded,
        "load_error": load_error,
        "monitor_logs": monitor_logs,
        "sides": sides,
    }
    return RESULTS[name]


def _rows(step, kind):
    return [row for hop in step["details"][kind]["hops"] for row in hop["keys"]]


def _close(reported, truth) -> bool:
    if reported is None:
        return False
    if truth == 0.0:
        return abs(reported) <= 1e-9
    return abs(reported - truth) <= REL * abs(truth)


def _rel_error(reported, truth) -> float:
    return 0.0 if truth == 0.0 and reported == 0.0 else abs(reported - truth) / max(abs(truth), 1e-30)


MAX_REL_ERROR = [0.0]


def _record(reported, truth):
    if reported is not None:
        MAX_REL_ERROR[0] = max(MAX_REL_ERROR[0], _rel_error(reported, truth))


# -- coverage ---------------------------------------------------------------------------------------


# ComfyUI cannot load a truncated file, so it has no "not loaded" log to compare with: that case's
# report is checked by test_findings_tell_what_comfyui_did.
LOADABLE = [name for name, case in CASES.items() if not case.expect.get("truncated")]


@pytest.mark.parametrize("result", params("coverage", LOADABLE), indirect=True)
def test_coverage_equals_comfyuis_not_loaded_log(result):
    case, step = result["case"], result["step"]
    loaders = {row["node_id"]: row for row in step["details"]["loaders"]}
    for i, f in enumerate(case.files):
        coverage = loaders[str(2 + i)]["coverage"]
        if f.strength_model == 0.0 and (f.model_only or f.strength_clip == 0.0):
            assert coverage is None
            continue
        expected = result["not_loaded"][i]
        assert set(coverage["unmatched_keys"]) == expected, f.name
        assert coverage["n_file_keys"] == len(f.sd)
        assert coverage["n_unmatched_keys"] == len(expected)
        assert coverage["n_matched_keys"] == len(f.sd) - len(expected)
    assert not any(NOT_LOADED.match(m) for m in result["monitor_logs"]), "the monitor repeated ComfyUI's log"


# -- per weight and per patch ----------------------------------------------------------------------


def _truth(side) -> dict[str, float]:
    return {
        k: float(torch.linalg.vector_norm(side["after"][k].double() - side["base"][k].double()))
        for k in side["base"]
    }


@pytest.mark.parametrize("result", params("per_weight"), indirect=True)
def test_each_weights_change_equals_comfyuis_patching(result):
    step = result["step"]
    for kind, side in result["sides"].items():
        truth = _truth(side)
        changed = {k for k, v in truth.items() if v > 0.0}
        weights = {w["key"]: w for w in step["details"][kind]["overall"]["weights"]}
        assert changed <= set(weights), f"{kind}: ComfyUI changed weights the pack does not list"
        for key, row in weights.items():
            _record(row["delta_norm"], truth[key])
            assert _close(row["delta_norm"], truth[key]), (kind, key, row, truth[key])
            assert row["applied"] == (truth[key] > 0.0) or row["delta_norm"] == 0.0, (kind, key, row)
            base = float(torch.linalg.vector_norm(side["base"][key].double()))
            assert row["base_norm"] == pytest.approx(base, rel=1e-6)


@pytest.mark.parametrize("result", params("per_patch"), indirect=True)
def test_each_patch_change_equals_comfyuis_arithmetic(result):
    step = result["step"]
    for kind, side in result["sides"].items():
        truth = _truth(side)
        patches = side["patcher"].patches
        for row in _rows(step, kind):
            key = row["key"]
            if truth[key] == 0.0:
                # ComfyUI did not change this weight: no patch on it may claim a change
                assert row["delta_norm"] == 0.0, (kind, row)
                assert row["applied"] is False or row["strength"] == 0.0, (kind, row)
                continue
            entries = [e for e in patches[key] if row["type"] == _type_of(e[1])]
            candidates = [single_patch_change(side["base"][key], e, key) for e in entries]
            assert any(_close(row["delta_norm"], c) for c in candidates), (kind, row, candidates)
            assert row["applied"] is True


def _type_of(value) -> str:
    name = getattr(value, "name", None)
    if isinstance(name, str):
        return name
    return value[0] if isinstance(value, tuple) and len(value) == 2 else "diff"


@pytest.mark.parametrize("result", params("totals"), indirect=True)
def test_totals_equal_comfyuis_patching(result):
    step = result["step"]
    for kind, side in result["sides"].items():
        truth = _truth(side)
        totals = step["details"][kind]["overall"]["totals"]
        listed = [w["key"] for w in step["details"][kind]["overall"]["weights"]]
        expected_delta = math.sqrt(sum(truth[k] ** 2 for k in truth))
        expected_base = math.sqrt(
            sum(float(torch.linalg.vector_norm(side["base"][k].double())) ** 2 for k in listed)
        )
        assert totals["delta_norm_partial"] is False
        _record(totals["delta_norm"], expected_delta)
        assert _close(totals["delta_norm"], expected_delta), (kind, totals["delta_norm"], expected_delta)
        if listed:
            assert totals["base_norm"] == pytest.approx(expected_base, rel=1e-6)
        else:  # nothing patched: a change of exactly 0, relative to nothing
            assert totals["base_norm"] is None and totals["relative_change"] is None
        if expected_base:
            relative = expected_delta / expected_base
            assert _close(totals["relative_change"], relative), (kind, totals["relative_change"], relative)
            assert _close(step["summary"][f"{kind}_relative_change_ratio"], relative)
        assert _close(step["summary"][f"{kind}_delta_norm"], expected_delta)
        assert step["summary"][f"{kind}_delta_norm_partial"] is False


def _built_ranks(case) -> set[int]:
    """The ranks the oracle built its files with, read from their tensors by name: the down/A
    factor's rows (LoRA, LoHa, LoKr's factorised side, GLoRA's a2), OFT's block size (BOFT: the
    last two dimensions are the block)."""
    ranks = set()
    for f in case.files:
        for key, tensor in f.sd.items():
            if key.endswith(
                ("lora_down.weight", "lora_A.weight", "hada_w1_b", "hada_w2_b", "lokr_w2_b", "a2.weight")
            ):
                ranks.add(int(tensor.shape[0]))
            elif key.endswith("oft_blocks"):
                ranks.add(int(tensor.shape[-1]))
    return ranks


@pytest.mark.parametrize("result", params("ranks"), indirect=True)
def test_every_adapter_with_a_rank_reports_it(result):
    reported = set()
    for kind in result["sides"]:
        for row in _rows(result["step"], kind):
            if row["type"] in ("lora", "loha", "lokr", "glora", "oft", "boft"):
                if row["type"] == "lokr" and row["rank"] is None and row.get("rank_unavailable"):
                    continue  # two full Kronecker factors: nothing was trained at a rank
                assert isinstance(row["rank"], int) and row["rank"] > 0, row
                reported.add(row["rank"])
    if reported:  # the ranks the files were built with, every one of them and no other
        assert reported == _built_ranks(result["case"]), (reported, _built_ranks(result["case"]))


@pytest.mark.parametrize("result", params("fields"), indirect=True)
def test_one_meaning_per_field_and_no_object_reprs(result):
    step = result["step"]
    loaders = {row["node_id"]: row for row in step["details"]["loaders"]}
    for i, f in enumerate(result["case"].files):
        assert loaders[str(2 + i)]["strength_model"] == f.strength_model
    for kind in result["sides"]:
        for row in _rows(step, kind):
            assert "strength_model" not in row, row  # ComfyUI's base-weight multiplier has its own name
            assert row["base_weight_scale"] == 1.0
    text = json.dumps(result["report"], allow_nan=False)
    assert " at 0x" not in text


# -- findings -------------------------------------------------------------------------------------


def _codes(step, level=None):
    return [f["code"] for f in step["findings"] if level is None or f["level"] == level]


@pytest.mark.parametrize("result", params("findings"), indirect=True)
def test_findings_tell_what_comfyui_did(result):
    case, step = result["case"], result["step"]
    errors = [f for f in step["findings"] if f["level"] == "error"]
    if case.expect.get("wrong_shapes"):
        (finding,) = [f for f in errors if f["code"] == "lora_shape_mismatch"]
        assert "different model size" in finding["message"]
        assert "diffusion_model.blocks.0." in finding["message"]
        assert "file makes [160, 160], model weight is [128, 128]" in finding["message"]
        logs = result["sides"]["model"]["logs"]
        assert any(m.startswith("ERROR lora") for m in logs)  # ComfyUI refused them too
        assert step["summary"]["success"] is False
        assert step["summary"]["model_delta_norm"] == 0.0
        return
    if case.expect.get("truncated"):
        assert result["load_error"] is not None
        (finding,) = [f for f in errors if f["code"] == "lora_file_corrupt"]
        assert "cut" in finding["message"] and "header" not in finding["message"], finding
        return
    stray = case.expect.get("stray")
    messages = " ".join(f["message"] for f in step["findings"])
    if stray == "warning":
        assert "lora_keys_unmatched" in _codes(step, "warning") and "another base model" not in messages
        assert step["summary"]["success"] is True
        return
    if stray == "error":
        assert "another base model" in messages
        return
    assert errors == [], errors
    assert step["summary"]["success"] is (
        any(f.strength_model != 0.0 for f in case.files) or case.arch == "sd1"
    )
    assert step["monitor_errors"] == []


def test_largest_relative_error_is_within_tolerance():
    """Runs after the parametrised tests of this module: the worst case they saw."""
    logging.getLogger(__name__).info("largest relative error seen: %.3g", MAX_REL_ERROR[0])
    assert MAX_REL_ERROR[0] <= REL
