"""The model manager's work in the panel: a real prompt loads the tiny WAN 2.1 in its sampler;
opening the run shows the load as a mark in the chart's model lane (its colour read from the
canvas) and the sampler's row has the bytes in the node table's Weights column, with the seconds
in its title."""

from __future__ import annotations

import pytest

from .browser_support import app_page, artifacts_dir, queue_from_page, wait_for_report

WAN = "pm_tiny_wan21.safetensors"
LOAD_RGB = (0x4A, 0xDE, 0x80)  # web/lib/model_lane.mjs LANE_COLORS.load


def loading_prompt() -> dict:
    """Node ids no other test uses, so the loader runs again (ComfyUI caches outputs by node id
    and inputs) and its new model is loaded by the sampler."""
    conditioning = {"tokens": 16, "hidden": 4096, "pooled_size": 0}
    return {
        "901": {"class_type": "UNETLoader", "inputs": {"unet_name": WAN, "weight_dtype": "default"}},
        "902": {"class_type": "PMTestConditioning", "inputs": {**conditioning, "seed": 1}},
        "903": {"class_type": "PMTestConditioning", "inputs": {**conditioning, "seed": 2}},
        "904": {
            "class_type": "EmptyHunyuanLatentVideo",
            "inputs": {"width": 32, "height": 32, "length": 1, "batch_size": 1},
        },
        "905": {
            "class_type": "KSampler",
            "inputs": {
                "model": ["901", 0],
                "positive": ["902", 0],
                "negative": ["903", 0],
                "latent_image": ["904", 0],
                "seed": 11,
                "steps": 1,
                "cfg": 1.0,
                "sampler_name": "euler",
                "scheduler": "simple",
                "denoise": 1.0,
            },
        },
        "906": {"class_type": "PMTestLatentDigest", "inputs": {"samples": ["905", 0]}},  # the output
    }


@pytest.fixture(scope="module")
def opened(server, tmp_path_factory):
    with app_page(server) as page:
        prompt_id = queue_from_page(page, loading_prompt())
        report = wait_for_report(server, prompt_id)
        assert report["status"] == "success", report["error"]
        page.evaluate("window.__pipelineMonitor.show({name: 'runs'})")
        row = page.locator(f'.pm-run-row[data-prompt-id="{prompt_id}"]:not(.pm-running-row)')
        row.wait_for(timeout=15_000)
        row.click()
        page.wait_for_selector(f'.pm-run[data-prompt-id="{prompt_id}"] .pm-nodes')
        yield page, report, artifacts_dir(tmp_path_factory)


def test_the_sampler_row_says_the_weights_it_loaded(opened):
    page, report, shots = opened
    loads = [e for e in report["model_residency"]["events"] if e["kind"].startswith("load_")]
    assert loads and loads[0]["node_id"] == "905" and loads[0]["bytes_moved"] > 0
    heads = page.locator(".pm-nodes th").all_inner_texts()
    assert any(h.startswith("Weights") for h in heads), heads
    column = next(i for i, h in enumerate(heads) if h.startswith("Weights"))
    cell = page.locator('.pm-nodes tr[data-node-id="905"] td').nth(column)
    assert cell.inner_text() not in ("", "–")
    assert cell.get_attribute("title").startswith("loaded ")
    page.screenshot(path=str(shots / "model_lane_node_table.png"))
    assert page.errors == []


def test_the_chart_lane_marks_the_load_in_its_colour(opened):
    page, report, shots = opened
    lane = page.evaluate("window.__pipelineMonitor.modelLane.map((e) => ({t: e.t, group: e.group}))")
    assert any(e["group"] == "load" for e in lane), lane
    page.wait_for_function("window.__pipelineMonitor.zoom !== null", timeout=10_000)
    # Where drawChart puts the lane (48 px left axis, 30 px right, 6 px top, 30 px under the plot),
    # the pixels of the load's mark, read from the canvas.
    found = page.evaluate(
        """(rgb) => { const panel = window.__pipelineMonitor; panel.draw();
          const canvas = panel.canvas, dpr = window.devicePixelRatio || 1;
          const w = canvas.clientWidth - 48 - 30, h = canvas.clientHeight - 6 - 30;
          const { from, to } = panel.chartSpan();
          const event = panel.modelLane.find((e) => e.group === 'load');
          const x = 48 + (w * (event.t - from)) / (to - from) + 1, y = 6 + h - 5 + 1;
          const data = canvas.getContext('2d').getImageData(Math.round(x * dpr), Math.round(y * dpr), 1, 1).data;
          return [data[0], data[1], data[2]]; }""",
        list(LOAD_RGB),
    )
    assert all(abs(a - b) <= 8 for a, b in zip(found, LOAD_RGB, strict=True)), found
    page.screenshot(path=str(shots / "model_lane_chart.png"))
