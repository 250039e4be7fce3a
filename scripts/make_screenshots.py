"""Screenshots of the panel in every state, and the example workflows' template thumbnails.

    COMFYUI_PATH=<ComfyUI 0.33 checkout> "$(COMFYUI_PATH=... bash scripts/setup_frontend_venv.sh 1.58.1 | tail -n 1)" \
        scripts/make_screenshots.py [--out docs/screenshots] [--thumbnails example_workflows] [--only thumbnails|panel]

(the pictures show the newest frontend, 1.58.1, over ComfyUI 0.33.0; any supported pair works)

Starts a headless ComfyUI (CPU) with this pack and the test pack on the tiny generated models,
drives Debian's Chromium (/usr/bin/chromium, never downloaded) with Playwright, runs real prompts
(LoRA + conditioning + VAE chain, dump and compare, the demo as a user queues it, a failed and an
interrupted run), and saves each state twice: the whole window at 1600 x 1000 with the sidebar at
its default width, 312 px (`<state>.png`), and the panel alone (`<state>_panel.png`); the top bar's
readout while a prompt runs (`00_topbar_readout.png`). Thumbnails are real
screenshots of each workflow in example_workflows/, saved next to it as `<name>.jpg`, which is where
ComfyUI's template browser asks for them.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import requests

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.browser.browser_support import (  # noqa: E402
    CHROMIUM,
    CHROMIUM_ARGS,
    PANEL,
    TAB_BUTTON,
    open_app,
    rich_prompt,
    write_tiny_wan_lora,
)

log = logging.getLogger("make_screenshots")
PACK = "pipeline-monitor"
WIDTH, HEIGHT = 1600, 1000
LORA = "pm_browser_lora.safetensors"
WAN, WAN_VAE = "pm_tiny_wan21.safetensors", "pm_tiny_wan21_vae.safetensors"


class Server:
    def __init__(self, comfyui: Path, base: Path, port: int):
        self.comfyui, self.base, self.port = comfyui, base, port
        self.url = f"http://127.0.0.1:{port}"
        self.process = None

    def start(self) -> Server:
        for sub in ("custom_nodes", "models", "input", "output", "user"):
            (self.base / sub).mkdir(parents=True, exist_ok=True)
        (self.base / "custom_nodes" / PACK).symlink_to(REPO, target_is_directory=True)
        (self.base / "custom_nodes" / "pm_testing_pack").symlink_to(
            REPO / "tests" / "comfyui" / "testing_pack", target_is_directory=True
        )
        env = {**os.environ, "COMFYUI_PATH": str(self.comfyui), "PYTHONUNBUFFERED": "1"}
        subprocess.run(
            [sys.executable, str(REPO / "scripts" / "make_tiny_models.py"), str(self.base)],
            check=True,
            env=env,
        )
        write_tiny_wan_lora(self.base, LORA)
        command = [sys.executable, "main.py", "--cpu", "--listen", "127.0.0.1", "--port", str(self.port)]
        command += ["--base-directory", str(self.base), "--database-url", "sqlite:///:memory:"]
        command += ["--disable-api-nodes"]
        self.log_file = open(self.base / "server.log", "wb")
        self.process = subprocess.Popen(
            command, cwd=self.comfyui, stdout=self.log_file, stderr=subprocess.STDOUT, env=env
        )
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"ComfyUI exited: see {self.base / 'server.log'}")
            try:
                if requests.get(self.url + "/system_stats", timeout=2).status_code == 200:
                    return self
            except requests.RequestException:
                pass
            time.sleep(0.5)
        raise RuntimeError("ComfyUI did not answer within 180 s")

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()

    def runs(self) -> list[dict]:
        return requests.get(self.url + "/pipeline_monitor/runs", timeout=10).json()["runs"]

    def wait_new_run(self, known: set[str], timeout_s: float = 180) -> str:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for run in self.runs():
                if run["prompt_id"] not in known and run["status"] != "running":
                    known.add(run["prompt_id"])
                    return run["prompt_id"]
            time.sleep(0.3)
        raise TimeoutError("no new run")


def queue_as_app(page, prompt: dict, name: str) -> str:
    """Queue through the frontend's api.queuePrompt, as the Run button does: the panel learns the
    prompt's workflow, so its running row is named and estimates its progress."""
    workflow = {"id": f"script-{name}", "nodes": [], "extra": {"pipeline_monitor_workflow_name": name}}
    return page.evaluate(
        """async ([output, workflow]) => (await window.comfyAPI.api.api.queuePrompt(0, {output, workflow})).prompt_id""",
        [prompt, workflow],
    )


def load_workflow(page, path: Path, name: str | None = None) -> None:
    workflow = json.loads(path.read_text())
    page.evaluate(
        "([wf, name]) => window.app.loadGraphData(wf, true, true, name)", [workflow, name or path.stem]
    )
    # the view the example is saved with: right of the open sidebar, titles drawn (a fit to the
    # whole canvas puts its first nodes under the sidebar). Frontend 1.58 still fits a loaded graph
    # again later (a window resize, as shot() does for the panel's picture): the canvas behind the
    # panel in those pictures is the frontend's fit. Opened from the template browser, the pack
    # frames it itself (web/lib/template_view.mjs, tests/browser/test_templates_browser.py).
    page.wait_for_timeout(400)
    page.evaluate(
        """(ds) => { if (!ds) return; const c = window.app.canvas; c.ds.scale = ds.scale;
          c.ds.offset[0] = ds.offset[0]; c.ds.offset[1] = ds.offset[1]; c.setDirty(true, true); }""",
        workflow.get("extra", {}).get("ds"),
    )
    page.wait_for_timeout(200)


def panel_open(page) -> bool:
    return page.locator(PANEL).count() > 0


def set_panel(page, open_: bool) -> None:
    if panel_open(page) != open_:
        page.click(TAB_BUTTON)
        page.wait_for_selector(PANEL, state="attached" if open_ else "detached")


# Tooltips and popovers (a workflow tab's preview, a sidebar button's label) are what the pointer
# happened to rest on, not the state being shown.
HIDE_TOOLTIPS = """
.p-tooltip, [role="tooltip"], .workflow-popover-fade, .p-popover, .node-tooltip { display: none !important; }
"""


def hide_tooltips(page) -> None:
    from playwright.sync_api import Error

    # Frontend 1.58's missing-model scan of its default graph may try an outside URL just then: the
    # page's content security policy blocks it, and Playwright reports that through this call.
    for attempt in range(3):
        try:
            page.add_style_tag(content=HIDE_TOOLTIPS)
            return
        except Error:
            if attempt == 2:
                raise
            page.wait_for_timeout(1000)


def park_mouse(page) -> None:
    """Move the pointer where it shows nothing: the canvas's empty right edge (the graph is fitted
    to the view with a margin), not the top-left corner, where a workflow tab's preview opens."""
    page.mouse.move(WIDTH - 8, HEIGHT / 2)


def shot(page, out: Path, state: str, element: str | None = None, keep_mouse: bool = False) -> None:
    if not keep_mouse:
        park_mouse(page)
    page.wait_for_timeout(300)
    page.screenshot(path=str(out / f"{state}.png"))
    if not panel_open(page):
        log.info("screenshot %s", state)
        return
    # The sidebar clips what is below the window: a window as tall as the panel shows all of the
    # panel, or all of a card taller than the window.
    tall = page.evaluate(f"document.querySelector('{PANEL}').getBoundingClientRect().top") + page.evaluate(
        f"document.querySelector('{PANEL}').scrollHeight"
    )
    page.set_viewport_size({"width": WIDTH, "height": int(min(8000, max(HEIGHT, tall + 40)))})
    page.wait_for_timeout(300)
    page.locator(element or PANEL).first.screenshot(path=str(out / f"{state}_panel.png"))
    page.set_viewport_size({"width": WIDTH, "height": HEIGHT})
    page.wait_for_timeout(200)
    log.info("screenshot %s", state)


def show(page, view: dict, wait: str) -> None:
    page.evaluate("(view) => window.__pipelineMonitor.show(view)", view)
    page.wait_for_selector(wait)
    page.locator(".sidebar-content-container").first.evaluate("(e) => e.scrollTop = 0")


GRAPH_BOUNDS = """() => {
  const app = window.app, ds = app.canvas.ds;
  const boxes = [...app.graph.nodes.map((n) => n.boundingRect), ...(app.graph.groups ?? []).map((g) => g._bounding ?? g.bounding)];
  const x0 = Math.min(...boxes.map((b) => b[0])), y0 = Math.min(...boxes.map((b) => b[1]));
  const x1 = Math.max(...boxes.map((b) => b[0] + b[2])), y1 = Math.max(...boxes.map((b) => b[1] + b[3]));
  const [ax, ay] = ds.convertOffsetToCanvas([x0, y0]), [bx, by] = ds.convertOffsetToCanvas([x1, y1]);
  const r = app.canvas.canvas.getBoundingClientRect(), dpr = window.devicePixelRatio || 1;
  return {x: r.left + ax / dpr, y: r.top + ay / dpr, width: (bx - ax) / dpr, height: (by - ay) / dpr};
}"""


def make_thumbnails(browser, url: str, folder: Path, width_px: int = 800) -> None:
    """A real screenshot of each workflow, cropped to its nodes and scaled to `width_px`; a large
    window keeps the zoom high enough for LiteGraph to draw titles and widgets."""
    from PIL import Image

    page = browser.new_page(viewport={"width": 2600, "height": 1400})
    open_app(page, url)
    for path in sorted(folder.glob("*.json")):
        load_workflow(page, path)
        box = page.evaluate(GRAPH_BOUNDS)
        pad = 16
        clip = {"x": max(0, box["x"] - pad), "y": max(0, box["y"] - pad)}
        clip["width"] = min(2600 - clip["x"], box["width"] + 2 * pad)
        clip["height"] = min(1400 - clip["y"], box["height"] + 2 * pad)
        target = folder / f"{path.stem}.jpg"
        page.screenshot(path=str(target), clip=clip, type="jpeg", quality=90)
        image = Image.open(target).convert("RGB")
        if image.width > width_px:
            image = image.resize((width_px, round(image.height * width_px / image.width)), Image.LANCZOS)
        image.save(target, quality=82, optimize=True)
        log.info("thumbnail %s (%dx%d)", target.name, image.width, image.height)
    page.close()


def template_browser(page, out: Path) -> None:
    """The template browser on the pack's examples: each card with its workflow's description."""
    set_panel(page, False)
    page.evaluate("window.app.extensionManager.command.execute('Comfy.BrowseTemplates')")
    dialog = page.locator("[role=dialog]")
    dialog.get_by_text(PACK, exact=True).first.click()
    page.wait_for_function(
        "document.querySelector('[data-testid=\"template-workflow-text_to_image_lora_monitor\"] p')"
        "?.textContent.startsWith('Needs')",
        timeout=20_000,
    )
    page.wait_for_function(  # each card titled with its workflow's title (web/lib/templates.mjs)
        "document.querySelector('[data-testid=\"template-workflow-models_profile_demo\"] h3')"
        "?.textContent.startsWith('Models profile')",
        timeout=20_000,
    )
    shot(page, out, "10_template_browser")
    dialog.locator('[data-testid="template-workflow-models_profile_demo"]').click()
    page.wait_for_selector("[role=dialog]", state="detached", timeout=20_000)


def running_prompt(page, out: Path, server: Server, known: set[str], earlier_run: str) -> None:
    """A 30 s prompt queued while the chart is zoomed to an earlier run: the chart goes back to
    live and the prompt is the runs list's first row, its progress estimated from a run before."""
    slow = {
        "1": {"class_type": "EmptyImage", "inputs": {"width": 64, "height": 64, "batch_size": 1, "color": 7}},
        "2": {
            "class_type": "PMTestSlow",
            "inputs": {"image": ["1", 0], "seconds": 30.0, "seed": int(time.time())},
        },
        "3": {"class_type": "PreviewImage", "inputs": {"images": ["2", 0]}},
    }
    # a run of it before, so the running row can estimate the progress from it
    quick = {**slow, "2": {**slow["2"], "inputs": {**slow["2"]["inputs"], "seconds": 8.0}}}
    queue_as_app(page, quick, "slow graph")
    server.wait_new_run(known)
    show(page, {"name": "run", "id": earlier_run}, ".pm-run .pm-step")  # zoomed to an earlier run ...
    queue_as_app(page, slow, "slow graph")  # ... until a prompt starts: live again
    page.wait_for_function("window.__pipelineMonitor.zoom === null", timeout=20_000)
    show(page, {"name": "runs"}, ".pm-running-row")
    page.wait_for_timeout(4000)
    box = page.locator(".pm-chart").bounding_box()
    if box:
        page.mouse.move(box["x"] + box["width"] * 0.8, box["y"] + box["height"] / 2)
    shot(page, out, "01_live_chart_running", keep_mouse=True)
    # the top bar's readout while the prompt runs: the node and its progress beside the Run button
    page.wait_for_function("document.querySelector('.pm-topbar-values')?.textContent.includes('running')", timeout=20_000)
    page.locator(".pm-topbar").screenshot(path=str(out / "00_topbar_readout.png"))


def make_panel_states(page, server: Server, out: Path) -> None:
    known = {r["prompt_id"] for r in server.runs()}
    set_panel(page, True)
    # a LoRA + conditioning + VAE graph, twice (the second compares with the first)
    rich = []
    for variant in (0, 1):
        queue_as_app(page, rich_prompt(LORA, WAN, WAN_VAE, variant), "LoRA + VAE chain (test graph)")
        rich.append(server.wait_new_run(known))
    # the example workflows as a user queues them: the open workflow's name travels with the prompt
    for stem in ("dump_and_compare", "models_profile_demo", "image_to_video_vae_chain"):
        load_workflow(page, REPO / "example_workflows" / f"{stem}.json")
        page.evaluate("window.app.queuePrompt(0, 1)")
        server.wait_new_run(known)
    # the monitors' summaries on the canvas after that run: none covers another node
    set_panel(page, False)
    page.wait_for_timeout(1000)
    page.evaluate("window.app.extensionManager.command.execute('Comfy.Canvas.FitView')")
    shot(page, out, "11_canvas_summaries")
    set_panel(page, True)
    compare_run = next(r["prompt_id"] for r in server.runs() if "tensor_compare" in r["step_kinds"])
    # a deep-profiled run of the same graph (the panel's "Deep-profile next prompt" button does this)
    requests.post(f"{server.url}/pipeline_monitor/deep_profile", json={"armed": True}, timeout=10)
    queue_as_app(page, rich_prompt(LORA, WAN, WAN_VAE, 2), "LoRA + VAE chain (test graph)")
    deep_run = server.wait_new_run(known)
    # a failed run: the models monitor ran, then a node raised
    failing = {
        "1": {"class_type": "UNETLoader", "inputs": {"unet_name": WAN, "weight_dtype": "default"}},
        "2": {"class_type": "PipelineMonitorModels", "inputs": {"model": ["1", 0]}},
        "3": {"class_type": "EmptyImage", "inputs": {"width": 64, "height": 64, "batch_size": 1, "color": 0}},
        "4": {"class_type": "PMTestRaise", "inputs": {"image": ["3", 0], "message": "out of ideas"}},
    }
    queue_as_app(page, failing, "failing graph")
    failed = server.wait_new_run(known)
    page.wait_for_timeout(1000)
    page.keyboard.press("Escape")  # ComfyUI's own error dialog for the failed prompt
    # an interrupted run: the live chart while it runs, then the user's cancel
    running_prompt(page, out, server, known, rich[0])
    requests.post(server.url + "/interrupt", timeout=10)
    interrupted = server.wait_new_run(known)
    show(page, {"name": "runs"}, f'.pm-run-row[data-prompt-id="{interrupted}"]')
    shot(page, out, "02_runs")
    # as a user opens a run: clicking it in the list zooms the chart to its time span too
    page.click(f'.pm-run-row[data-prompt-id="{rich[1]}"]')
    page.wait_for_selector(".pm-run .pm-step")
    page.wait_for_selector(".pm-zoom-bar", state="visible")
    page.locator(".sidebar-content-container").first.evaluate("(e) => e.scrollTop = 0")
    shot(page, out, "03_run_top")
    page.click(".pm-live-back")
    for kind in ("lora", "conditioning", "vae_encode", "models", "latent", "tensor_dump"):
        card = page.locator(f'.pm-step[data-kind="{kind}"]').first
        card.scroll_into_view_if_needed()
        if card.locator(".pm-details summary").count():
            card.locator(".pm-details summary").first.click()
        shot(page, out, f"04_card_{kind}", f'.pm-step[data-kind="{kind}"]')
    show(page, {"name": "run", "id": compare_run}, '.pm-step[data-kind="tensor_compare"]')
    page.locator('.pm-step[data-kind="tensor_compare"]').scroll_into_view_if_needed()
    shot(page, out, "04_card_tensor_compare", '.pm-step[data-kind="tensor_compare"]')
    # no scrolling: the card is taller than the window, and the panel's shot is taken from its top
    show(page, {"name": "run", "id": deep_run}, '.pm-step[data-kind="deep_profile"]')
    shot(page, out, "04_card_deep_profile", '.pm-step[data-kind="deep_profile"]')
    show(page, {"name": "compare", "a": rich[0], "b": rich[1]}, ".pm-compare .pm-compare-nodes")
    shot(page, out, "05_compare")
    show(page, {"name": "run", "id": failed}, ".pm-run .pm-problems")
    shot(page, out, "06_failed_run")
    show(page, {"name": "run", "id": interrupted}, ".pm-run .pm-problems")
    shot(page, out, "07_interrupted_run")
    # the canvas after a run: badges on every node that finished, the monitor's summary
    load_workflow(page, REPO / "example_workflows" / "models_profile_demo.json", "models_profile_demo again")
    page.evaluate("window.app.queuePrompt(0, 1)")
    server.wait_new_run(known)
    page.wait_for_timeout(1500)
    set_panel(page, False)
    page.evaluate("window.app.extensionManager.command.execute('Comfy.Canvas.FitView')")
    shot(page, out, "08_canvas_badges")
    template_browser(page, out)
    report = requests.get(f"{server.url}/pipeline_monitor/runs/{rich[1]}/report.html", timeout=30).text
    html_page = page.context.browser.new_page(viewport={"width": WIDTH, "height": HEIGHT})
    html_page.set_content(report)
    html_page.screenshot(path=str(out / "09_html_report.png"), full_page=True)
    html_page.close()


def main() -> int:
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(REPO / "docs" / "screenshots"))
    parser.add_argument("--thumbnails", default=str(REPO / "example_workflows"))
    parser.add_argument("--only", choices=("thumbnails", "panel"))
    parser.add_argument("--port", type=int, default=8199)
    args = parser.parse_args()
    comfyui = os.environ.get("COMFYUI_PATH")
    if not comfyui or not Path(comfyui, "main.py").exists():
        parser.error("COMFYUI_PATH must point to a ComfyUI checkout (0.8.0 to 0.33.0)")
    if not Path(CHROMIUM).exists():
        parser.error(f"{CHROMIUM} is missing: apt-get install -y chromium fonts-dejavu-core")
    from playwright.sync_api import sync_playwright

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    base = Path(tempfile.mkdtemp(prefix="pm-screenshots-"))
    server = Server(Path(comfyui).resolve(), base, args.port)
    try:
        server.start()
        # a fresh user, without the first-run template browser; no minimap or canvas info in pictures
        settings = {
            "Comfy.TutorialCompleted": True,
            "Comfy.Minimap.Visible": False,
            "Comfy.Graph.CanvasInfo": False,
        }
        requests.post(server.url + "/api/settings", json=settings, timeout=10)
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
            if args.only != "panel":
                make_thumbnails(browser, server.url, Path(args.thumbnails))
            if args.only != "thumbnails":
                page = browser.new_page(viewport={"width": WIDTH, "height": HEIGHT})
                open_app(page, server.url)
                hide_tooltips(page)
                make_panel_states(page, server, out)
            browser.close()
    finally:
        server.stop()
        shutil.rmtree(base, ignore_errors=True)
    log.info("screenshots in %s", out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
