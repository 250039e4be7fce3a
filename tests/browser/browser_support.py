"""Helpers for the browser tests: launching Chromium, opening ComfyUI, queueing from the page,
counting the timers the pack's own scripts start, and small test files for the server."""

from __future__ import annotations

import os
import time
from contextlib import contextmanager
from pathlib import Path

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-sync",
]
TAB_ID = "pipeline-monitor"
# The tab's button as every frontend draws it: a `.side-bar-button` whose aria-label is the tab's
# tooltip (1.58 dropped the `<id>-tab-button` class of 1.35 and 1.49).
TAB_BUTTON = '.side-bar-button[aria-label^="Pipeline Monitor"]'
PANEL = ".sidebar-content-container .pipeline-monitor-panel"
EVIL = '<img src=x onerror="window.__pmXss=(window.__pmXss||0)+1">'

# Counts setTimeout/setInterval/requestAnimationFrame calls made from the pack's scripts (their
# URLs are under /extensions/pipeline-monitor/), so a test can show the closed panel does nothing,
# and keeps the ids of the pack's intervals not yet cleared in window.__pmIntervals.
COUNT_PACK_TIMERS = """
(() => {
  window.__pmTimerCalls = 0;
  window.__pmIntervals = new Set();
  for (const name of ["setTimeout", "setInterval", "requestAnimationFrame"]) {
    const original = window[name].bind(window);
    window[name] = function (...args) {
      const stack = new Error().stack || "";
      const ours = stack.includes("/extensions/pipeline-monitor/");
      if (ours) window.__pmTimerCalls += 1;
      const id = original(...args);
      if (ours && name === "setInterval") window.__pmIntervals.add(id);
      return id;
    };
  }
  const clear = window.clearInterval.bind(window);
  window.clearInterval = (id) => { window.__pmIntervals.delete(id); return clear(id); };
})();
"""


def artifacts_dir(tmp_path_factory) -> Path:
    """Screenshots and downloads: PIPELINE_MONITOR_ARTIFACTS, or a pytest temp folder."""
    chosen = os.environ.get("PIPELINE_MONITOR_ARTIFACTS")
    path = Path(chosen) if chosen else tmp_path_factory.mktemp("browser_artifacts")
    path.mkdir(parents=True, exist_ok=True)
    return path


def open_app(page, url: str) -> None:
    # ComfyUI_frontend's own fixture answers the release check; offline it would only fail slowly.
    page.route(
        "**/releases**", lambda route: route.fulfill(status=200, body="[]", content_type="application/json")
    )
    page.goto(url)
    page.wait_for_function("window.app && window.app.extensionManager", timeout=90_000)
    page.wait_for_selector(".p-blockui-mask", state="hidden", timeout=60_000)


@contextmanager
def app_page(server, width: int = 1500, height: int = 950, init_script: str | None = None, open_panel: bool = True):
    """Chromium on `server`'s ComfyUI as a fresh user (first-run template browser skipped), page
    errors collected in `page.errors`, the panel's tab opened unless `open_panel` is False."""
    import requests
    from playwright.sync_api import sync_playwright

    requests.post(server.url + "/api/settings", json={"Comfy.TutorialCompleted": True}, timeout=10)
    playwright = sync_playwright().start()
    browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
    context = browser.new_context(viewport={"width": width, "height": height})
    if init_script:
        context.add_init_script(init_script)
    page = context.new_page()
    page.errors = []
    page.on("pageerror", lambda error: page.errors.append(str(error)))
    try:
        open_app(page, server.url)
        if open_panel:
            page.click(TAB_BUTTON)
            page.wait_for_selector(PANEL)
        yield page
    finally:
        context.close()
        browser.close()
        playwright.stop()


def toggle_tab(page, tab_id: str = TAB_ID) -> None:
    """Open or close a sidebar tab with the command its button runs (every frontend since 1.3)."""
    page.evaluate("(id) => window.app.extensionManager.command.execute(`Workspace.ToggleSidebarTab.${id}`)", tab_id)


def widen_sidebar(page, x: int = 640) -> None:
    """Drag the splitter between the sidebar and the canvas, as a user would for a wider panel
    (PrimeVue's `.p-splitter-gutter` up to 1.49, a `[role=separator]` handle in 1.58)."""
    handles = page.locator(".p-splitter-gutter")
    if handles.count() == 0:
        handles = page.locator("[role=separator]:visible")
    gutter = handles.first.bounding_box()
    if not gutter:
        return
    y = gutter["y"] + 300
    page.mouse.move(gutter["x"] + gutter["width"] / 2, y)
    page.mouse.down()
    page.mouse.move(x, y, steps=8)
    page.mouse.up()


def queue_from_page(page, prompt: dict) -> str:
    """POST /prompt with the page's own clientId, so executing/executed events reach the page."""
    return page.evaluate(
        """async (prompt) => {
          const api = window.comfyAPI.api.api;
          const response = await api.fetchApi('/prompt', {method: 'POST', headers: {'Content-Type': 'application/json'},
            body: JSON.stringify({client_id: api.clientId, prompt})});
          const body = await response.json();
          if (!response.ok) throw new Error(JSON.stringify(body));
          return body.prompt_id;
        }""",
        prompt,
    )


def wait_for_report(server, prompt_id: str, timeout_s: float = 90) -> dict:
    server.wait(prompt_id, timeout=timeout_s)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        response = server.get(f"/pipeline_monitor/runs/{prompt_id}")
        if response.status_code == 200:
            return response.json()
        time.sleep(0.1)
    raise TimeoutError(f"no report for {prompt_id}")


def write_tiny_wan_lora(base: Path, name: str) -> None:
    """A rank-2 LoRA on two layers of the tiny WAN 2.1 (dim 128), plus one key it does not have."""
    import torch
    from safetensors.torch import save_file

    folder = base / "models" / "loras"
    folder.mkdir(parents=True, exist_ok=True)
    gen = torch.Generator().manual_seed(5)
    tensors = {}
    for layer in ("blocks_0_self_attn_q", "blocks_1_cross_attn_k", "blocks_9_self_attn_q"):
        tensors[f"lora_unet_{layer}.lora_down.weight"] = torch.randn(2, 128, generator=gen) * 0.1
        tensors[f"lora_unet_{layer}.lora_up.weight"] = torch.randn(128, 2, generator=gen) * 0.1
        tensors[f"lora_unet_{layer}.alpha"] = torch.tensor(2.0)
    save_file(tensors, str(folder / name))


def rich_prompt(lora_name: str, wan: str, wan_vae: str, variant: int = 0) -> dict:
    """Models, LoRA, conditioning (with a hostile prompt text and title), VAE chain, latent, dump.
    Another `variant` changes the seed, image and text, so the sampler and the monitors run again."""
    return {
        "1": {"class_type": "UNETLoader", "inputs": {"unet_name": wan, "weight_dtype": "default"}},
        "2": {
            "class_type": "LoraLoaderModelOnly",
            "inputs": {"model": ["1", 0], "lora_name": lora_name, "strength_model": 1.0},
        },
        "3": {"class_type": "PipelineMonitorLora", "inputs": {"model": ["2", 0]}},
        "4": {
            "class_type": "PMTestConditioning",
            "inputs": {"tokens": 64, "hidden": 4096, "pooled_size": 0, "seed": 1},
        },
        "5": {
            "class_type": "PMTestConditioning",
            "inputs": {"tokens": 64, "hidden": 4096, "pooled_size": 0, "seed": 2},
        },
        "6": {
            "class_type": "EmptyHunyuanLatentVideo",
            "inputs": {"width": 32, "height": 32, "length": 1, "batch_size": 1},
        },
        "7": {
            "class_type": "KSampler",
            "inputs": {
                "model": ["3", 0],
                "positive": ["4", 0],
                "negative": ["5", 0],
                "latent_image": ["6", 0],
                "seed": 3 + variant,
                "steps": 2,
                "cfg": 2.0,
                "sampler_name": "euler",
                "scheduler": "simple",
                "denoise": 1.0,
            },
        },
        "8": {"class_type": "PipelineMonitorLatent", "inputs": {"latent": ["7", 0]}},
        "9": {"class_type": "VAELoader", "inputs": {"vae_name": wan_vae}},
        "10": {
            "class_type": "EmptyImage",
            "inputs": {"width": 64, "height": 64, "batch_size": 5, "color": 4227264 + variant},
        },
        "11": {
            "class_type": "PipelineMonitorVAEEncode",
            "inputs": {
                "pixels": ["10", 0],
                "vae": ["9", 0],
                "strategy": "auto",
                "allow_dummy": False,
                "tile_size": 512,
                "overlap": 64,
                "temporal_size": 64,
                "temporal_overlap": 8,
            },
        },
        "12": {
            "class_type": "PipelineMonitorTensorDump",
            "inputs": {"latent": ["11", 0], "name": "pm_browser", "npy": False},
        },
        "13": {"class_type": "PMTestTinyClip", "inputs": {"kind": "sd1", "seed": 0}},
        "14": {
            "class_type": "CLIPTextEncode",
            "inputs": {"clip": ["13", 0], "text": f"a cat {variant} {EVIL}"},
            "_meta": {"title": EVIL},
        },
        "15": {
            "class_type": "PipelineMonitorConditioning",
            "inputs": {"positive": ["14", 0], "clip": ["13", 0]},
        },
        "16": {"class_type": "PipelineMonitorModels", "inputs": {"model": ["1", 0], "vae": ["9", 0]}},
    }
