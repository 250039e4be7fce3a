"""PipelineMonitorTensorDump and PipelineMonitorTensorCompare in-process: real CONDITIONING from a
tiny CLIP, real latents, the dumps folder under ComfyUI's output directory (a tmp dir here)."""

from __future__ import annotations

import uuid

import pytest
import torch
from dump_support import codes, dumps_dir, files_under, output_dir, run_node

pytestmark = pytest.mark.comfyui

DUMP = "PipelineMonitorTensorDump"
COMPARE = "PipelineMonitorTensorCompare"
LIVE = "(live value)"


def unique(prefix):
    return f"{prefix}_{uuid.uuid4().hex[:8]}"


def dump(comfy, runtime, name, npy=False, prompt=None, **values):
    output, steps = run_node(comfy, runtime, DUMP, "tensor_dump", prompt=prompt, name=name, npy=npy, **values)
    assert len(steps) == 1, steps
    return output, steps[0]


def compare(comfy, runtime, dump_a, dump_b=LIVE, rtol=1e-5, atol=1e-8, **values):
    output, steps = run_node(
        comfy,
        runtime,
        COMPARE,
        "tensor_compare",
        dump_a=dump_a,
        dump_b=dump_b,
        rtol=rtol,
        atol=atol,
        **values,
    )
    assert len(steps) == 1, steps
    return output, steps[0]


def load(file_name):
    from safetensors import safe_open

    with safe_open(str(dumps_dir() / file_name), framework="pt") as f:
        return {k: f.get_tensor(k) for k in f.keys()}, f.metadata()


def test_schemas(comfy):
    from comfy_api.latest._io import first_real_override

    node = comfy.nodes.NODE_CLASS_MAPPINGS[DUMP]
    inputs = node.INPUT_TYPES()
    assert set(inputs["optional"]) >= {"conditioning", "latent", "image"}
    assert inputs["required"]["name"][0] == "STRING" and inputs["required"]["npy"][0] == "BOOLEAN"
    assert node.RETURN_TYPES == ["CONDITIONING", "LATENT", "IMAGE"] and node.OUTPUT_NODE is True
    assert first_real_override(node, "fingerprint_inputs") is None  # a passthrough never forces re-runs
    compare_node = comfy.nodes.NODE_CLASS_MAPPINGS[COMPARE]
    assert compare_node.RETURN_TYPES == [] and compare_node.OUTPUT_NODE is True


def test_dump_real_conditioning_and_latent(comfy, tiny, pack_runtime):
    with torch.inference_mode():
        cond = comfy.nodes.NODE_CLASS_MAPPINGS["CLIPTextEncode"]().encode(tiny.clip, "a cat")[0]
    latent = comfy.nodes.NODE_CLASS_MAPPINGS["EmptyLatentImage"]().generate(64, 64, 1)[0]
    image = torch.rand(1, 16, 16, 3)
    name = unique("pm_real")
    prompt = {
        "5": {"class_type": "CLIPTextEncode", "inputs": {"text": "a cat", "clip": ["4", 1]}},
        "6": {"class_type": "EmptyLatentImage", "inputs": {}},
        "9": {"class_type": DUMP, "inputs": {"conditioning": ["5", 0], "latent": ["6", 0], "name": name}},
    }
    output, step = dump(
        comfy, pack_runtime, name, True, prompt, conditioning=cond, latent=latent, image=image
    )
    assert output.result[0] is cond and output.result[1] is latent and output.result[2] is image
    assert output.ui["dump"] == [f"{name}.safetensors"]
    # A writer thread writes the file: the node's text names it and says "written: yes" only when
    # the writer was done before the node returned; the report, made after the write, says yes.
    lines = [line for line in output.ui["text"][0].splitlines()[:3] if line != "written: yes"]
    assert lines[:2] == [f"file: {name}.safetensors", "tensors: 4"]
    assert step["details"]["write"]["state"] == "written" and step["details"]["write"]["background"], step["details"]["write"]["reason"]
    summary = step["summary"]
    assert summary["written"] and summary["n_tensors"] == 4 and summary["n_npy_files"] == 4
    assert summary["value_kinds"] == ["conditioning", "latent", "image"]
    assert step["details"]["download_url"] == f"/pipeline_monitor/dumps/{name}.safetensors"
    assert step["details"]["sources"]["conditioning"] == {"node_id": "5", "class_type": "CLIPTextEncode"}
    assert step["details"]["tensors"]["cond.0.tensor"]["shape"] == [1, 77, 32]
    tensors, meta = load(f"{name}.safetensors")
    assert set(tensors) == {"cond.0.tensor", "cond.0.pooled_output", "latent.samples", "image"}
    assert torch.equal(tensors["cond.0.tensor"], cond[0][0]) and torch.equal(tensors["image"], image)
    assert torch.equal(tensors["cond.0.pooled_output"], cond[0][1]["pooled_output"])
    assert meta["dump_node_id"] == "9" and meta["prompt_id"].startswith("pm-tensor_dump-")
    assert '"class_type": "EmptyLatentImage"' in meta["source_nodes"]
    assert all(isinstance(v, str) for v in meta.values())
    assert (dumps_dir() / f"{name}.cond.0.tensor.npy").is_file()


def test_wan_shaped_conditioning_gets_an_encoder_family(comfy, pack_runtime):
    from testing_pack.conditioning_nodes import PMTestConditioning

    cond = PMTestConditioning().make(512, 4096, 0, 1)[0]
    _, step = dump(comfy, pack_runtime, unique("pm_wan_cond"), conditioning=cond)
    assert step["summary"]["encoder_family"].startswith("WAN")
    _, meta = load(step["summary"]["file_name"])
    assert meta["encoder_family"].startswith("WAN")


def test_non_tensor_extras_are_listed_not_dumped(comfy, pack_runtime):
    cond = [[torch.randn(1, 4, 8), {"pooled_output": None, "hooks": object(), "guidance": 3.5}]]
    _, step = dump(comfy, pack_runtime, unique("pm_extras"), conditioning=cond)
    assert step["summary"]["n_tensors"] == 1
    assert step["details"]["skipped"] == {"cond.0.hooks": "object"}
    assert step["details"]["extras"] == {"cond.0.guidance": "3.5"}
    assert "not_dumped" in codes(step, "info")


@pytest.mark.parametrize("name", ["../../etc/passwd", "/abs", "a\x00b", "CON", "..", "x/../../y", "C:\\x"])
def test_bad_names_fail_validation_and_write_nothing(comfy, pack_runtime, name):
    node = comfy.nodes.NODE_CLASS_MAPPINGS[DUMP]
    message = node.validate_inputs(name)
    assert isinstance(message, str) and "refused" in message
    before = files_under(output_dir().parent)
    latent = {"samples": torch.zeros(1, 4, 8, 8)}
    output, step = dump(comfy, pack_runtime, name, latent=latent)
    assert output.result[1] is latent
    assert not step["summary"]["written"] and "name_refused" in codes(step, "error")
    refusal = next(f["message"] for f in step["findings"] if f["code"] == "name_refused")
    assert refusal in output.ui["text"][0]
    assert files_under(output_dir().parent) == before


def test_good_names_pass_validation(comfy):
    node = comfy.nodes.NODE_CLASS_MAPPINGS[DUMP]
    assert node.validate_inputs("my_latent") is True
    assert node.validate_inputs("my_latent.safetensors") is True


def test_dump_over_the_cap_is_refused(comfy, pack_runtime, monkeypatch):
    monkeypatch.setenv("PIPELINE_MONITOR_DUMP_MAX_BYTES", "1000")
    before = files_under(output_dir().parent)
    latent = {"samples": torch.zeros(1, 4, 16, 16)}
    output, step = dump(comfy, pack_runtime, unique("pm_big"), latent=latent)
    assert output.result[1] is latent
    [finding] = [f for f in step["findings"] if f["code"] == "too_large"]
    assert finding["level"] == "error" and "PIPELINE_MONITOR_DUMP_MAX_BYTES" in finding["message"]
    assert files_under(output_dir().parent) == before


def test_nothing_connected(comfy, pack_runtime):
    output, step = dump(comfy, pack_runtime, unique("pm_nothing"))
    assert tuple(output.result) == (None, None, None)
    assert codes(step) == ["nothing_connected"] and not step["summary"]["written"]


def test_compare_combo_lists_dumps_as_they_appear(comfy, pack_runtime):
    node = comfy.nodes.NODE_CLASS_MAPPINGS[COMPARE]
    name = unique("pm_listed")
    assert name not in node.INPUT_TYPES()["required"]["dump_a"][1]["options"]
    dump(comfy, pack_runtime, name, latent={"samples": torch.zeros(1, 4, 8, 8)})
    inputs = node.INPUT_TYPES()["required"]
    assert name in inputs["dump_a"][1]["options"]
    assert (
        inputs["dump_b"][1]["options"][0] == LIVE and name in inputs["dump_b"][1]["options"]
    )
    assert node.validate_inputs(f"{name}.safetensors", LIVE) is True
    assert "refused" in node.validate_inputs("../x.safetensors", LIVE)
    assert "refused" in node.validate_inputs(f"{name}.safetensors", "/etc/passwd")
    assert "No dump" in node.validate_inputs("(no dumps yet)", LIVE)


def test_compare_two_dumps_identical_different_incompatible(comfy, pack_runtime):
    base = torch.randn(1, 4, 8, 8)
    names = {key: unique(f"pm_{key}") for key in ("a", "b", "c", "d")}
    dump(comfy, pack_runtime, names["a"], latent={"samples": base})
    dump(comfy, pack_runtime, names["b"], latent={"samples": base.clone()})
    dump(comfy, pack_runtime, names["c"], latent={"samples": base + 0.5})
    dump(comfy, pack_runtime, names["d"], latent={"samples": torch.zeros(1, 4, 16, 16)})
    f = {k: f"{v}.safetensors" for k, v in names.items()}

    output, step = compare(comfy, pack_runtime, f["a"], f["b"])
    assert output.result is None
    # compared on the writer thread: the node returned the verdict only if it was done by then
    returned = output.ui["text"][0].splitlines()
    pending_note = comfy.pack_module("nodes.dump_nodes").COMPARE_PENDING_NOTE
    assert returned[:1] == ["status: identical"] or returned[-1] == f"tensor_compare: {pending_note}"
    assert step["details"]["work"] == {**step["details"]["work"], "state": "done", "background": True}
    assert step["summary"]["status"] == "identical" and step["summary"]["n_compared"] == 1
    assert step["details"]["a"]["name"] == f["a"] and step["details"]["b"]["name"] == f["b"]

    _, step = compare(comfy, pack_runtime, f["a"], f["c"], rtol=0, atol=0.1)
    assert step["summary"]["status"] == "different" and step["summary"]["max_abs_diff"] == pytest.approx(0.5)
    assert "different" in codes(step, "warning")

    _, step = compare(comfy, pack_runtime, f["a"], f["d"])
    assert step["summary"]["status"] == "incompatible" and "incompatible" in codes(step, "error")
    assert "[1, 4, 8, 8] vs [1, 4, 16, 16]" in step["summary"]["verdict"]


def test_compare_dump_with_live_value(comfy, pack_runtime):
    samples = torch.randn(1, 16, 3, 8, 8)
    name = unique("pm_live")
    dump(comfy, pack_runtime, name, latent={"samples": samples})
    _, step = compare(comfy, pack_runtime, f"{name}.safetensors", LIVE, latent={"samples": samples.clone()})
    assert step["summary"]["status"] == "identical" and step["details"]["b"]["live"] is True
    _, step = compare(comfy, pack_runtime, f"{name}.safetensors", LIVE)
    assert (
        step["summary"]["status"] == "error"
        and "no CONDITIONING, LATENT or IMAGE" in step["summary"]["verdict"]
    )


def test_corrupt_or_missing_dump_on_compare_is_a_clear_error(comfy, pack_runtime):
    name = unique("pm_corrupt")
    dumps_dir().mkdir(parents=True, exist_ok=True)
    (dumps_dir() / f"{name}.safetensors").write_bytes(b"\xff" * 64)
    _, step = compare(comfy, pack_runtime, f"{name}.safetensors", LIVE, latent={"samples": torch.zeros(1)})
    assert step["summary"]["status"] == "error"
    assert "not a readable safetensors file" in step["summary"]["verdict"]
    assert "compare_failed" in codes(step, "error")
    _, step = compare(
        comfy, pack_runtime, "pm_missing_0000.safetensors", LIVE, latent={"samples": torch.zeros(1)}
    )
    assert "No dump named" in step["summary"]["verdict"]


def test_compare_fingerprint_follows_the_dump_files(comfy, pack_runtime):
    node = comfy.nodes.NODE_CLASS_MAPPINGS[COMPARE]
    name = unique("pm_fp")
    dump(comfy, pack_runtime, name, latent={"samples": torch.zeros(1, 4, 8, 8)})
    first = node.fingerprint_inputs(dump_a=f"{name}.safetensors", dump_b=LIVE, rtol=1e-5, atol=1e-8)
    assert first == node.fingerprint_inputs(dump_a=f"{name}.safetensors", dump_b=LIVE, rtol=1e-5, atol=1e-8)
    dump(comfy, pack_runtime, name, latent={"samples": torch.ones(1, 4, 16, 16)})
    assert first != node.fingerprint_inputs(dump_a=f"{name}.safetensors", dump_b=LIVE, rtol=1e-5, atol=1e-8)


def test_steps_in_a_run_report_are_strict_json_valid_against_the_schema(comfy, pack_runtime):
    import json
    from pathlib import Path

    import jsonschema

    schema = json.loads(
        (Path(__file__).resolve().parents[2] / "schemas" / "run_report.schema.json").read_text()
    )
    samples = torch.randn(1, 4, 8, 8)
    samples[0, 0, 0, 0] = float("nan")
    samples[0, 0, 0, 1] = float("inf")
    latent = {"samples": samples}
    name = unique("pm_schema")
    pack_runtime.recorder.begin_run("pm-schema-run", None)
    try:
        for class_type, inputs in (
            ("PipelineMonitorLatent", {"latent": latent}),
            (DUMP, {"name": name, "npy": False, "latent": latent}),
            (
                COMPARE,
                {"dump_a": f"{name}.safetensors", "dump_b": LIVE, "rtol": 0.0, "atol": 0.0, "latent": latent},
            ),
            (COMPARE, {"dump_a": "../bad", "dump_b": LIVE, "rtol": 0.0, "atol": 0.0}),
        ):
            node = comfy.nodes.NODE_CLASS_MAPPINGS[class_type]
            node.PREPARE_CLASS_CLONE({"hidden_inputs": {"UNIQUE_ID": "9"}}).execute(**inputs)
    finally:  # as the profile hook ends a prompt: the writer's work (dump, comparisons) done first
        comfy.pack_module("monitors.dumps.writer").finish_pending_writes()
        pack_runtime.recorder.end_run("success")
    on_disk = json.loads(
        (Path(pack_runtime.store.reports_dir) / "pm-schema-run.json").read_text(), parse_constant=pytest.fail
    )
    jsonschema.validate(on_disk, schema)
    kinds = [s["kind"] for s in on_disk["steps"]]
    assert kinds == ["latent", "tensor_dump", "tensor_compare", "tensor_compare"]
    assert on_disk["steps"][0]["summary"]["n_nan"] == 1 and on_disk["steps"][0]["summary"]["n_inf"] == 1
    assert on_disk["steps"][2]["summary"]["status"] == "identical"  # NaN equals NaN, Inf the same Inf
    assert on_disk["steps"][3]["summary"]["status"] == "error"


def test_nodes_keep_no_tensor_alive(comfy, pack_runtime):
    import gc
    import weakref

    samples = torch.randn(1, 4, 8, 8)
    cond = [[torch.randn(1, 4, 8), {"pooled_output": torch.randn(1, 8)}]]
    refs = [weakref.ref(samples), weakref.ref(cond[0][0]), weakref.ref(cond[0][1]["pooled_output"])]
    name = unique("pm_alive")
    run_node(comfy, pack_runtime, "PipelineMonitorLatent", "latent", latent={"samples": samples})
    dump(comfy, pack_runtime, name, True, conditioning=cond, latent={"samples": samples})
    compare(comfy, pack_runtime, f"{name}.safetensors", LIVE, latent={"samples": samples})
    del samples, cond
    gc.collect()
    assert [r() for r in refs] == [None, None, None]


def test_huge_expanded_latent_is_described_and_refused_without_allocation(comfy, pack_runtime):
    huge = {"samples": torch.zeros(1).expand(1, 16, 1000, 1000, 1000)}  # 64 GB as float32
    before = files_under(output_dir().parent)
    output, step = dump(comfy, pack_runtime, unique("pm_huge"), latent=huge)
    assert output.result[1] is huge
    assert step["details"]["tensors"]["latent.samples"]["stats_skipped"] is True
    assert "too_large" in codes(step, "error") and files_under(output_dir().parent) == before
