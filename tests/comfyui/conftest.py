"""Integration tests against a real ComfyUI checkout (COMFYUI_PATH: 0.8.0 to 0.33.0); skipped without one.

Fixtures:
  comfy          ComfyUI imported in-process on CPU, with this pack loaded by nodes.load_custom_node
  tiny           tiny real MODEL (SD1.5-like ModelPatcher), CLIP (SD1) and VAE (KL) on CPU
  pack_runtime   the pack's runtime replaced by one whose store writes to a tmp dir
  server         one headless ComfyUI server per session, with this pack, tests/comfyui/testing_pack
                 and the tiny model files from scripts/make_tiny_models.py
"""

from __future__ import annotations

import asyncio
import copy
import importlib
import importlib.util
import os
import random
import shlex
import shutil
import socket
import subprocess
import sys
import time
import types
import uuid
from pathlib import Path

import pytest

from tests.log_lines import strip_colours

HERE = Path(__file__).resolve().parent
REPO_ROOT = HERE.parents[1]
COMFYUI_PATH = os.environ.get("COMFYUI_PATH")
SKIP_REASON = "COMFYUI_PATH is not set: integration tests need a ComfyUI checkout (0.8.0 to 0.33.0)"
# The smoke set (marker `smoke`): what CI also runs against the oldest ComfyUI we support (0.8.0),
# while every test runs against the newest (0.33.0): the seams, ComfyUI's executor with the pack,
# the LoRA truth against ComfyUI's own patching, the VAE chain, a real server's reports, and the
# model manager's loads and unloads.
SMOKE_MODULES = frozenset(
    {
        "test_comfyui_seams.py",
        "test_comfyui_inprocess.py",
        "test_executor_inprocess.py",
        "test_lora_oracle.py",
        "test_vae_encode.py",
        "test_comfyui_server.py",
        "test_lora_server.py",
        "test_subgraphs_server.py",
        "test_model_residency_inprocess.py",
        "test_model_residency_server.py",
    }
)
PORTS = range(8300, 8400)
# Hang watchdogs only, never a speed bar: the suite must pass on 2 cores under heavy load, where a
# server start or a tiny prompt can take minutes.
SERVER_START_TIMEOUT_S = 300
PROMPT_TIMEOUT_S = 300


def pytest_collection_modifyitems(config, items):
    for item in items:
        if HERE not in Path(str(item.path)).resolve().parents:
            continue
        item.add_marker(pytest.mark.comfyui)
        if Path(str(item.path)).name in SMOKE_MODULES:
            item.add_marker(pytest.mark.smoke)
        if not COMFYUI_PATH:
            item.add_marker(pytest.mark.skip(reason=SKIP_REASON))


def load_script(name: str):
    """A module from scripts/ (not a package), e.g. make_tiny_models."""
    spec = importlib.util.spec_from_file_location(f"pm_scripts_{name}", REPO_ROOT / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# -- in-process ComfyUI -------------------------------------------------------------------------

# A small SD-style KL VAE (32 base channels): the tiny VAE of the in-process tests and the GPU ones.
TINY_KL_VAE_CONFIG = {
    "params": {
        "embed_dim": 4,
        "ddconfig": {
            "double_z": True,
            "z_channels": 4,
            "resolution": 64,
            "in_channels": 3,
            "out_ch": 3,
            "ch": 32,
            "ch_mult": [1, 2, 2, 2],
            "num_res_blocks": 1,
            "attn_resolutions": [],
            "dropout": 0.0,
        },
    }
}



def classic_executor(comfy):
    """ComfyUI's PromptExecutor with the classic cache and no RAM-pressure limits, as main.py makes
    it (0.33 added the "ram_inactive" headroom to the cache arguments; 0.8 ignores it)."""
    import execution

    return execution.PromptExecutor(
        comfy.server, cache_type=execution.CacheType.CLASSIC, cache_args={"lru": 0, "ram": 0, "ram_inactive": 0}
    )



class StubPromptServer:
    """What packs touch at import and run time: a route table, send_sync, client_id."""

    def __init__(self):
        from aiohttp import web

        self.routes = web.RouteTableDef()
        self.client_id = None
        self.sent = []

    def send_sync(self, event, data, sid=None):
        self.sent.append((event, data, sid))


def import_comfyui(tmp_dir: Path):
    comfy_path = str(Path(COMFYUI_PATH).resolve())
    # ComfyUI's top-level names (nodes, utils, server) must win over the repo root (`python -m
    # pytest` puts the current directory first, and the pack has a `nodes` package).
    if comfy_path in sys.path:
        sys.path.remove(comfy_path)
    sys.path.insert(0, comfy_path)
    stray = sys.modules.get("nodes")
    if stray is not None and not str(getattr(stray, "__file__", "")).startswith(comfy_path):
        raise RuntimeError(f"a different 'nodes' module was imported first: {stray.__file__}")
    import comfy.cli_args

    comfy.cli_args.args.cpu = True  # before model_management probes CUDA at import
    # Order matters: model_management after args.cpu; utils.extra_config before server/nodes
    # (nodes.py puts comfy/ first on sys.path, where `utils` is comfy/utils.py); the stub
    # PromptServer before any pack is loaded.
    importlib.import_module("comfy.model_management")
    importlib.import_module("utils.extra_config")
    server = importlib.import_module("server")
    server.PromptServer.instance = StubPromptServer()
    folder_paths = importlib.import_module("folder_paths")
    nodes = importlib.import_module("nodes")

    # Keep everything the pack or ComfyUI writes out of the checkout.
    for setter, sub in (
        (folder_paths.set_output_directory, "output"),
        (folder_paths.set_temp_directory, "temp"),
        (folder_paths.set_input_directory, "input"),
        (folder_paths.set_user_directory, "user"),
    ):
        (tmp_dir / sub).mkdir(parents=True, exist_ok=True)
        setter(str(tmp_dir / sub))
    return nodes, server


@pytest.fixture(scope="session")
def comfy(tmp_path_factory):
    nodes, server = import_comfyui(tmp_path_factory.mktemp("comfy_inprocess"))
    loaded = asyncio.run(nodes.load_custom_node(str(REPO_ROOT)))
    assert loaded, "nodes.load_custom_node returned False for the pack (see the log above)"
    node_class = nodes.NODE_CLASS_MAPPINGS["PipelineMonitorModels"]
    package = node_class.__module__.rsplit(".", 2)[0]  # "<pack>.nodes.models_node" -> "<pack>"

    def pack_module(name: str):
        return importlib.import_module(f"{package}.{name}")

    return types.SimpleNamespace(
        nodes=nodes, server=server.PromptServer.instance, package=package, pack_module=pack_module
    )


def _init_weights(module, seed=0):
    load_script("make_tiny_models").init_weights(module, seed)
    return module


@pytest.fixture(scope="session")
def tiny(comfy):
    import comfy.ldm.models.autoencoder
    import comfy.model_patcher
    import comfy.sd
    import comfy.sd1_clip
    import comfy.supported_models
    import torch

    cpu = torch.device("cpu")
    unet_config = {
        "in_channels": 4,
        "out_channels": 4,
        "model_channels": 32,
        "channel_mult": [1, 2],
        "num_res_blocks": [1, 1],
        "transformer_depth": [1, 1],
        "transformer_depth_output": [1, 1, 1, 1],
        "transformer_depth_middle": 1,
        "context_dim": 32,
        "num_heads": 8,
        "use_linear_in_transformer": False,
        "adm_in_channels": None,
        "use_temporal_attention": False,
        "image_size": 32,
        "use_spatial_transformer": True,
        "legacy": False,
    }
    model_config = comfy.supported_models.SD15(unet_config)
    model_config.set_inference_dtype(torch.float32, None)
    base_model = _init_weights(model_config.get_model({}), seed=1)
    model = comfy.model_patcher.ModelPatcher(base_model, load_device=cpu, offload_device=cpu)

    target = types.SimpleNamespace(
        clip=comfy.sd1_clip.SD1ClipModel, tokenizer=comfy.sd1_clip.SD1Tokenizer, params={}
    )
    clip_config = {
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_attention_heads": 2,
        "num_hidden_layers": 3,
        "projection_dim": 32,
    }
    clip = comfy.sd.CLIP(target=target, model_options={"clip_l_model_config": clip_config})
    _init_weights(clip.cond_stage_model, seed=2)

    vae_config = copy.deepcopy(TINY_KL_VAE_CONFIG)
    source = _init_weights(comfy.ldm.models.autoencoder.AutoencoderKL(**vae_config["params"]), seed=3)
    vae = comfy.sd.VAE(sd=source.state_dict(), config=vae_config, device=cpu, dtype=torch.float32)
    return types.SimpleNamespace(model=model, clip=clip, vae=vae)


@pytest.fixture
def pack_runtime(comfy, tmp_path):
    """A fresh runtime for the pack whose reports go to tmp_path; the old one is restored after."""
    runtime_mod = comfy.pack_module("nodes.runtime")
    store_mod = comfy.pack_module("monitors.engine.store")
    recorder_mod = comfy.pack_module("monitors.engine.recorder")
    sampler_mod = comfy.pack_module("monitors.engine.sampler")
    store = store_mod.RunStore(str(tmp_path / "reports"))
    runtime = runtime_mod.Runtime(store, recorder_mod.RunRecorder(store), sampler_mod.Sampler())
    previous = runtime_mod.set_runtime(runtime)
    yield runtime
    runtime_mod.set_runtime(previous)


# -- headless server ------------------------------------------------------------------------------


def free_port() -> int:
    # A random order makes two test sessions started together unlikely to pick the same port
    # (ComfyUI binds it only after loading, ~15 s later).
    for port in random.sample(PORTS, len(PORTS)):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port in {PORTS.start}-{PORTS.stop - 1}")


class ComfyServer:
    """A ComfyUI server process and a small HTTP client for it."""

    def __init__(
        self, base: Path, port: int, log_path: Path, device_args=("--cpu",), extra_env: dict | None = None
    ):
        """`device_args`: where ComfyUI runs and how it manages memory (`--cpu`, or on a GPU e.g.
        `--disable-dynamic-vram`); `extra_env`: variables set for the server process only."""
        self.base, self.port, self.log_path = base, port, log_path
        self.device_args, self.extra_env = tuple(device_args), dict(extra_env or {})
        self.url = f"http://127.0.0.1:{port}"
        self.client_id = uuid.uuid4().hex
        self.process = None

    def start(self):
        command = [
            sys.executable,
            "main.py",
            *self.device_args,
            "--listen",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--base-directory",
            str(self.base),
            "--database-url",
            "sqlite:///:memory:",
            "--disable-api-nodes",
            # e.g. --front-end-root DIR where the frontend package is missing (scripts/gpu_check.sh)
            *shlex.split(os.environ.get("PIPELINE_MONITOR_COMFYUI_ARGS", "")),
        ]
        env = {**os.environ, "PYTHONUNBUFFERED": "1", **self.extra_env}
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen(
                command, cwd=COMFYUI_PATH, stdout=log, stderr=subprocess.STDOUT, env=env
            )
        deadline = time.monotonic() + SERVER_START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"ComfyUI exited with {self.process.returncode}:\n{self.log()[-4000:]}")
            try:
                # The answer must come from this process: ComfyUI logs the URL once it has bound.
                bound = f"127.0.0.1:{self.port}" in self.log()
                if bound and self.get("/system_stats", timeout=2).status_code == 200:
                    return self
            except Exception:
                pass
            time.sleep(0.25)
        raise RuntimeError(f"ComfyUI did not answer within {SERVER_START_TIMEOUT_S} s:\n{self.log()[-4000:]}")

    def stop(self):
        if self.process is None or self.process.poll() is not None:
            return
        self.process.terminate()
        try:
            self.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=15)

    def log(self) -> str:
        """The server's console output without colour codes: ComfyUI 0.33+ prefixes each line with a
        coloured level tag (and colours some whole lines), which line patterns must not see."""
        return strip_colours(self.log_path.read_text(errors="replace"))

    def get(self, path: str, timeout: float = 10):
        import requests

        return requests.get(self.url + path, timeout=timeout)

    def get_json(self, path: str):
        response = self.get(path)
        assert response.status_code == 200, f"GET {path}: {response.status_code} {response.text[:500]}"
        return response.json()

    def queue(self, prompt: dict) -> str:
        import requests

        response = requests.post(
            self.url + "/prompt", json={"prompt": prompt, "client_id": self.client_id}, timeout=10
        )
        assert response.status_code == 200, f"POST /prompt: {response.status_code} {response.text[:2000]}"
        return response.json()["prompt_id"]

    def wait(self, prompt_id: str, timeout: float = PROMPT_TIMEOUT_S) -> dict:
        """The /history entry of a prompt once it finished (success or error)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            history = self.get_json(f"/history/{prompt_id}")
            if prompt_id in history:
                return history[prompt_id]
            time.sleep(0.1)
        raise TimeoutError(f"prompt {prompt_id} not finished after {timeout} s:\n{self.log()[-3000:]}")

    def run(self, prompt: dict) -> tuple[str, dict]:
        prompt_id = self.queue(prompt)
        return prompt_id, self.wait(prompt_id)


def prepare_base(base: Path) -> Path:
    """A ComfyUI base directory: this pack and tests/comfyui/testing_pack in custom_nodes, and the
    tiny model files from scripts/make_tiny_models.py."""
    for sub in ("custom_nodes", "models", "input", "output", "user"):
        (base / sub).mkdir()
    (base / "custom_nodes" / "pipeline-monitor").symlink_to(REPO_ROOT, target_is_directory=True)
    (base / "custom_nodes" / "pm_testing_pack").symlink_to(HERE / "testing_pack", target_is_directory=True)
    generate = subprocess.run(
        [sys.executable, str(REPO_ROOT / "scripts" / "make_tiny_models.py"), str(base)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert generate.returncode == 0, generate.stdout + generate.stderr
    return base


def session_server(tmp_path_factory, extra_env: dict | None = None):
    """The `server` fixture's body; the fixture lives in tests/conftest.py so that the comfyui and
    browser tests share one server per session."""
    base = prepare_base(tmp_path_factory.mktemp("comfy_base"))
    instance = ComfyServer(base, free_port(), base / "server.log", extra_env=extra_env)
    try:
        yield instance.start()
    finally:
        instance.stop()
        # The full-size and family tests put ~6 GB of generated models here, and pytest keeps the
        # last three sessions' folders: the log and outputs stay for a look, the models go.
        shutil.rmtree(base / "models", ignore_errors=True)
