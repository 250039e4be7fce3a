"""Bad input matrix at node level: the real node classes in-process, each bad input gives a clear
finding (or, for the VAE encode which produces a value, a clear error), the monitors pass their
inputs through as the very same objects, and nothing is written outside the pack's folders
(ComfyUI's output, temp and input folders are listed before and after each case)."""

from __future__ import annotations

import os
import struct

import pytest
import torch
from dump_support import output_dir, run_node

pytestmark = pytest.mark.comfyui

NAN = float("nan")
PACK_FOLDER = "pipeline_monitor"
LORA_PROMPT_NODE = "9"


def lora_prompt(lora_name: str) -> dict:
    return {
        "1": {"class_type": "PMTinyModels", "inputs": {}},
        "2": {
            "class_type": "LoraLoaderModelOnly",
            "inputs": {"model": ["1", 0], "lora_name": lora_name, "strength_model": 1.0},
        },
        "9": {"class_type": "PipelineMonitorLora", "inputs": {"model": ["2", 0]}},
    }


def text_prompt(text) -> dict:
    return {
        "2": {"class_type": "CLIPTextEncode", "inputs": {"text": text, "clip": ["3", 0]}},
        "9": {"class_type": "PipelineMonitorConditioning", "inputs": {"positive": ["2", 0]}},
    }


def cond(tensor, extras=None):
    return [[tensor, {} if extras is None else extras]]


def ones_cond():
    return cond(torch.ones(1, 77, 32))


# (case, node, step kind, inputs (name -> value, or a callable of the fixtures ns), prompt, expected
# finding codes (any of them) or "monitor_error").
CASES = [
    ("models_nothing", "PipelineMonitorModels", "models", {}, None, {"nothing_connected"}),
    ("models_model_str", "PipelineMonitorModels", "models", {"model": "abc"}, None, {"no_weights"}),
    ("models_clip_int", "PipelineMonitorModels", "models", {"clip": 5}, None, {"no_weights"}),
    ("models_vae_tensor", "PipelineMonitorModels", "models", {"vae": torch.zeros(2)}, None, {"no_weights"}),
    ("lora_model_str", "PipelineMonitorLora", "lora", {"model": "abc"}, None, {"lora_not_a_patcher"}),
    (
        "lora_model_tensor",
        "PipelineMonitorLora",
        "lora",
        {"model": torch.zeros(3)},
        None,
        {"lora_not_a_patcher"},
    ),
    (
        "lora_file_missing",
        "PipelineMonitorLora",
        "lora",
        "tiny_model",
        lora_prompt("pm_missing.safetensors"),
        {"lora_file_missing"},
    ),
    (
        "lora_file_zero_byte",
        "PipelineMonitorLora",
        "lora",
        "tiny_model",
        lora_prompt("pm_matrix_zero.safetensors"),
        {"lora_file_corrupt"},
    ),
    (
        "lora_file_corrupt",
        "PipelineMonitorLora",
        "lora",
        "tiny_model",
        lora_prompt("pm_matrix_corrupt.safetensors"),
        {"lora_file_corrupt"},
    ),
    (
        "lora_name_traversal",
        "PipelineMonitorLora",
        "lora",
        "tiny_model",
        lora_prompt("../../etc/passwd"),
        {"lora_file_missing"},
    ),
    ("cond_none", "PipelineMonitorConditioning", "conditioning", {"positive": None}, None, {"not_a_list"}),
    ("cond_str", "PipelineMonitorConditioning", "conditioning", {"positive": "x"}, None, {"not_a_list"}),
    (
        "cond_nan",
        "PipelineMonitorConditioning",
        "conditioning",
        {"positive": cond(torch.full((1, 77, 32), NAN))},
        None,
        {"nan_values"},
    ),
    (
        "cond_empty",
        "PipelineMonitorConditioning",
        "conditioning",
        {"positive": cond(torch.zeros(1, 0, 32))},
        None,
        {"empty_tensor"},
    ),
    (
        "cond_huge_meta",
        "PipelineMonitorConditioning",
        "conditioning",
        {"positive": cond(torch.empty(1 << 20, 77, 4096, device="meta"))},
        None,
        {"stats_skipped"},
    ),
    (
        "cond_extras_objects",
        "PipelineMonitorConditioning",
        "conditioning",
        {"positive": cond(torch.ones(1, 77, 32), {"pooled_output": "x", "control": object()})},
        None,
        {"pooled_not_tensor"},
    ),
    (
        "cond_clip_wrong_type",
        "PipelineMonitorConditioning",
        "conditioning",
        {"positive": "ones", "clip": "not a clip"},
        None,
        {"clip_not_a_clip"},
    ),
    (
        "cond_prompt_100kB",
        "PipelineMonitorConditioning",
        "conditioning",
        {"positive": "ones"},
        text_prompt("word " * 20_000),
        {"long_prompt"},
    ),
    (
        "cond_prompt_non_utf8",
        "PipelineMonitorConditioning",
        "conditioning",
        {"positive": "ones"},
        text_prompt(b"\xff\xfe"),
        {"text_unresolved"},
    ),
    (
        "cond_prompt_script",
        "PipelineMonitorConditioning",
        "conditioning",
        {"positive": "ones"},
        text_prompt("<script>alert(1)</script>"),
        {"script_in_prompt"},
    ),
    ("latent_none", "PipelineMonitorLatent", "latent", {"latent": None}, None, {"not_a_latent"}),
    (
        "latent_tensor",
        "PipelineMonitorLatent",
        "latent",
        {"latent": torch.zeros(1, 4, 8, 8)},
        None,
        {"not_a_latent"},
    ),
    (
        "latent_0d",
        "PipelineMonitorLatent",
        "latent",
        {"latent": {"samples": torch.tensor(1.0)}},
        None,
        {"unusual_rank"},
    ),
    (
        "latent_huge_expand",
        "PipelineMonitorLatent",
        "latent",
        {"latent": {"samples": torch.zeros(1, 1, 1, 1).expand(4096, 16, 1024, 1024)}},
        None,
        {"stats_skipped"},
    ),
    (
        "latent_inf",
        "PipelineMonitorLatent",
        "latent",
        {"latent": {"samples": torch.full((1, 4, 8, 8), float("inf"))}},
        None,
        {"non_finite"},
    ),
]
for name in ("../evil", "/tmp/pm_evil", "evil\x00x", "CON", "..", "C:evil", "%2e%2e%2fevil"):
    CASES.append(
        (
            f"dump_name_{name!r}",
            "PipelineMonitorTensorDump",
            "tensor_dump",
            {"name": name, "latent": {"samples": torch.ones(1, 4, 8, 8)}},
            None,
            {"name_refused"},
        )
    )
CASES += [
    (
        "dump_nothing_tensor",
        "PipelineMonitorTensorDump",
        "tensor_dump",
        {"name": "pm_matrix_ok", "conditioning": "x"},
        None,
        {"not_written"},
    ),
    (
        "dump_huge_expand",
        "PipelineMonitorTensorDump",
        "tensor_dump",
        {
            "name": "pm_matrix_huge",
            "latent": {"samples": torch.zeros(1, 1, 1, 1).expand(4096, 16, 1024, 1024)},
        },
        None,
        {"too_large"},
    ),
    (
        "compare_traversal",
        "PipelineMonitorTensorCompare",
        "tensor_compare",
        {"dump_a": "../x.safetensors", "dump_b": "(live value)", "rtol": 1e-5, "atol": 1e-8},
        None,
        {"compare_failed"},
    ),
    (
        "compare_missing",
        "PipelineMonitorTensorCompare",
        "tensor_compare",
        {"dump_a": "pm_nope.safetensors", "dump_b": "(live value)", "rtol": 1e-5, "atol": 1e-8},
        None,
        {"compare_failed"},
    ),
    (
        "compare_zero_byte",
        "PipelineMonitorTensorCompare",
        "tensor_compare",
        {"dump_a": "pm_zero_dump.safetensors", "dump_b": "(live value)", "rtol": 1e-5, "atol": 1e-8},
        None,
        {"compare_failed"},
    ),
    (
        "compare_corrupt_header",
        "PipelineMonitorTensorCompare",
        "tensor_compare",
        {"dump_a": "pm_corrupt_dump.safetensors", "dump_b": "(live value)", "rtol": 1e-5, "atol": 1e-8},
        None,
        {"compare_failed"},
    ),
]
PASSTHROUGH = {
    "PipelineMonitorModels": ("model", "clip", "vae"),
    "PipelineMonitorLora": ("model", "clip"),
    "PipelineMonitorConditioning": ("positive", "negative", "clip"),
    "PipelineMonitorLatent": ("latent",),
    "PipelineMonitorTensorDump": ("conditioning", "latent", "image"),
    "PipelineMonitorTensorCompare": (),
}


def tree(root) -> set[str]:
    return {os.path.relpath(os.path.join(d, f), root) for d, _, fs in os.walk(root) for f in fs}


@pytest.fixture(scope="module")
def bad_files(comfy, tmp_path_factory):
    """A LoRA folder with a zero-byte and a corrupt file; a zero-byte and a corrupt dump."""
    import folder_paths

    folder = tmp_path_factory.mktemp("matrix_loras")
    (folder / "pm_matrix_zero.safetensors").write_bytes(b"")
    (folder / "pm_matrix_corrupt.safetensors").write_bytes(struct.pack("<Q", 1 << 40) + b"{}")
    folder_paths.add_model_folder_path("loras", str(folder))
    dumps = output_dir() / PACK_FOLDER / "dumps"
    dumps.mkdir(parents=True, exist_ok=True)
    (dumps / "pm_zero_dump.safetensors").write_bytes(b"")
    (dumps / "pm_corrupt_dump.safetensors").write_bytes(struct.pack("<Q", 7) + b"{broken")
    return folder


def resolve(value, tiny):
    if value == "tiny_model":
        return {"model": tiny.model}
    if value == "ones":
        return ones_cond()
    if isinstance(value, dict):
        return {k: resolve(v, tiny) if isinstance(v, str) and v in ("ones",) else v for k, v in value.items()}
    return value


@pytest.mark.parametrize(
    ("case", "node", "kind", "inputs", "prompt", "expected"), CASES, ids=[c[0] for c in CASES]
)
def test_bad_input_at_node_level(
    comfy, tiny, pack_runtime, bad_files, case, node, kind, inputs, prompt, expected
):
    roots = [output_dir().parent / sub for sub in ("output", "temp", "input")]
    before = {str(r): tree(r) for r in roots}
    values = resolve(inputs, tiny)
    output, steps = run_node(comfy, pack_runtime, node, kind, prompt=prompt, **values)
    assert len(steps) == 1, steps
    step = steps[0]
    found = {f["code"] for f in step["findings"]}
    assert expected & found, (case, found, step["monitor_errors"])
    assert step["monitor_errors"] == [], case
    for index, name in enumerate(PASSTHROUGH[node]):
        assert output.result[index] is values.get(name), (case, name)
    for root in roots:
        new = tree(root) - before[str(root)]
        outside = [p for p in new if not (root.name == "output" and p.startswith(PACK_FOLDER + os.sep))]
        assert outside == [], (case, outside)


# -- routes: bad requests against the real server get a clear 4xx JSON error and change nothing ----

BAD_REQUESTS = [
    ("POST", "/pipeline_monitor/settings", b"{not json", 400),
    ("POST", "/pipeline_monitor/settings", b"[1, 2]", 400),
    ("POST", "/pipeline_monitor/settings", b'{"max_runs": "abc"}', 400),
    ("POST", "/pipeline_monitor/settings", b'{"max_runs": -1}', 400),
    ("POST", "/pipeline_monitor/settings", b'{"max_runs": 1e12}', 400),
    ("POST", "/pipeline_monitor/settings", b'{"max_runs": true}', 400),
    ("POST", "/pipeline_monitor/settings", b'{"max_runs": null}', 400),
    ("POST", "/pipeline_monitor/settings", b'{"sample_interval_ms": NaN}', 400),
    ("POST", "/pipeline_monitor/settings", b'{"max_report_files": Infinity}', 400),
    ("POST", "/pipeline_monitor/settings", b'{"max_runs": -Infinity}', 400),
    ("POST", "/pipeline_monitor/settings", b'{"profile_enabled": "yes"}', 400),
    ("POST", "/pipeline_monitor/settings", b'{"max_runs": 5, "unknown": 1}', 400),
    ("POST", "/pipeline_monitor/settings", b'{"max_runs": 5, "max_report_files": 0}', 400),
    ("POST", "/pipeline_monitor/live", b"\xff\xfe not utf-8", 400),
    ("POST", "/pipeline_monitor/live", b'{"client_id": null, "watching": true}', 400),
    ("POST", "/pipeline_monitor/live", b'{"client_id": "a\\u0000b", "watching": true}', 400),
    ("POST", "/pipeline_monitor/live", b'{"client_id": "../x", "watching": true}', 400),
    ("POST", "/pipeline_monitor/live", ('{"client_id": "%s", "watching": true}' % ("x" * 200)).encode(), 400),
    ("POST", "/pipeline_monitor/live", b'{"client_id": "abc", "watching": "yes"}', 400),
    ("POST", "/pipeline_monitor/live", b'{"client_id": "pm-no-such-socket", "watching": true}', 404),
    ("GET", "/pipeline_monitor/runs?limit=abc", None, 400),
    ("GET", "/pipeline_monitor/runs/..%2f..%2fetc", None, 404),
    ("GET", "/pipeline_monitor/runs/%00", None, 404),
    ("GET", "/pipeline_monitor/runs/" + "x" * 300 + "/report.html", None, 404),
    ("GET", "/pipeline_monitor/dumps/..%2fsecret.safetensors", None, 404),
    ("GET", "/pipeline_monitor/dumps/%2Fetc%2Fpasswd", None, 404),
    ("GET", "/pipeline_monitor/dumps/CON.safetensors", None, 404),
    ("GET", "/pipeline_monitor/dumps/a%00.safetensors", None, 404),
]


@pytest.mark.parametrize(
    ("method", "path", "body", "status"),
    BAD_REQUESTS,
    ids=[f"{m} {p[18:50]} {b!r:.30}" for m, p, b, _ in BAD_REQUESTS],
)
def test_bad_requests_at_the_routes(server, method, path, body, status):
    import requests

    roots = [server.base / "output", server.base / "input", server.base / "models"]
    before = {str(r): tree(r) for r in roots}
    settings_before = server.get_json("/pipeline_monitor/settings")
    response = requests.request(
        method, server.url + path, data=body, headers={"Content-Type": "application/json"}, timeout=10
    )
    assert response.status_code == status, response.text[:300]
    assert response.headers["Content-Type"].startswith("application/json")
    assert response.headers["X-Content-Type-Options"] == "nosniff"
    assert isinstance(response.json().get("error"), str) and response.json()["error"]
    assert server.get_json("/pipeline_monitor/settings") == settings_before  # rejected whole
    for root in roots:
        new = tree(root) - before[str(root)]
        assert [p for p in new if not p.startswith(PACK_FOLDER + os.sep)] == [], new
