"""Subgraphs and headless clients on a real ComfyUI server: an API prompt with nested compound ids
(54:73, 54:62:174) and a UI workflow carrying definitions.subgraphs gives one roll-up per
instance, checked against the node rows; a websocket client that is not the panel (the docs'
client example) gets the digest of its own prompts and nothing of another client's."""

from __future__ import annotations

import importlib.util
import json
import random
import uuid

import pytest

from tests.comfyui.conftest import PROMPT_TIMEOUT_S, REPO_ROOT

pytestmark = pytest.mark.comfyui

OUTER, INNER = "5d1b4c2e-0000-4000-8000-00000000a001", "5d1b4c2e-0000-4000-8000-00000000a002"
# as the frontend sends it: instance 54 (titled) of OUTER at the root, instance 62 of INNER inside
# OUTER; both definitions at the root's definitions.subgraphs
WORKFLOW = {
    "id": "pm-subgraph-test",
    "nodes": [
        {"id": 3, "type": "EmptyImage"},
        {"id": 54, "type": OUTER, "title": "Upscale pass"},
        {"id": 9, "type": "PreviewImage"},
    ],
    "definitions": {
        "subgraphs": [
            {"id": OUTER, "name": "Outer", "nodes": [{"id": 73, "type": "PMTestSlow"}, {"id": 62, "type": INNER}]},
            {"id": INNER, "name": "Inner", "nodes": [{"id": 174, "type": "PMTestSlow"}, {"id": 175, "type": "PMTestSlow"}]},
        ]
    },
}


def subgraph_prompt(seed: int) -> dict:
    """Node 3 at the root, 73 inside 54, 174 and 175 inside 62 inside 54, the preview at the root."""

    def slow(source):
        return {"class_type": "PMTestSlow", "inputs": {"image": [source, 0], "seconds": 0.05, "seed": seed}}

    return {
        "3": {"class_type": "EmptyImage", "inputs": {"width": 8, "height": 8, "batch_size": 1, "color": seed % 9999}},
        "54:73": slow("3"),
        "54:62:174": slow("54:73"),
        "54:62:175": slow("54:62:174"),
        "9": {"class_type": "PreviewImage", "inputs": {"images": ["54:62:175", 0]}},
    }


def client_example():
    """docs/examples/headless_client.py, the client a user copies."""
    pytest.importorskip("websocket", reason="the client example needs the websocket-client package")
    spec = importlib.util.spec_from_file_location("pm_headless_client", REPO_ROOT / "docs" / "examples" / "headless_client.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run_with_workflow(server, client, ws, client_id, seed):
    prompt_id = client.queue(server.url, subgraph_prompt(seed), client_id, {"extra_pnginfo": {"workflow": WORKFLOW}})
    digest = client.wait_digest(ws, prompt_id)
    return prompt_id, digest, client.get_report(server.url, prompt_id, wait_s=PROMPT_TIMEOUT_S)


@pytest.fixture(scope="module")
def runs(server):
    """One run that executes every node and the same prompt again (all cached), from the example client."""
    client = client_example()
    client_id = uuid.uuid4().hex
    ws = client.connect(server.url, client_id, timeout_s=PROMPT_TIMEOUT_S)
    seed = random.randrange(1, 2**31 - 1)
    try:
        first = run_with_workflow(server, client, ws, client_id, seed)
        again = run_with_workflow(server, client, ws, client_id, seed)
    finally:
        ws.close()
    return first, again


def check_rollup_against_rows(rollup, rows):
    members = [r for r in rows if r["node_id"].startswith(rollup["id"] + ":")]
    assert rollup["node_ids"] == [r["node_id"] for r in members]
    assert rollup["n_cached"] == sum(1 for r in members if r["cached"])
    timed = [r for r in members if r["duration_s"] is not None]
    if not timed:
        assert rollup["wall_s"] is None and rollup["wall_unknown_reason"]
        return
    start = min(r["start_offset_s"] for r in timed)
    end = max(r["start_offset_s"] + r["duration_s"] for r in timed)
    assert rollup["start_offset_s"] == pytest.approx(start)
    assert rollup["wall_s"] == pytest.approx(end - start)
    assert rollup["node_time_sum_s"] == pytest.approx(sum(r["duration_s"] for r in timed))
    assert rollup["peak_rss_bytes"] == max(r["peak_rss_bytes"] for r in timed if r["peak_rss_bytes"] is not None)


def test_each_subgraph_rolls_up_its_node_rows(runs):
    (prompt_id, digest, report), _ = runs
    assert report["status"] == "success", report.get("error")
    rows = report["nodes"]
    assert {r["node_id"] for r in rows} == set(subgraph_prompt(1))
    outer, inner = report["subgraphs"]
    assert (outer["id"], outer["parent_id"], outer["name"]) == ("54", None, "Upscale pass")
    assert (inner["id"], inner["parent_id"], inner["name"]) == ("54:62", "54", "Inner")
    assert outer["node_ids"] == ["54:73", "54:62:174", "54:62:175"]
    for rollup in (outer, inner):
        check_rollup_against_rows(rollup, rows)
        assert rollup["wall_s"] > 0 and rollup["n_cached"] == 0
    # wall-clock: the nested instance lies inside the outer one
    assert outer["start_offset_s"] <= inner["start_offset_s"]  # one clock: the inner nodes are outer nodes
    assert inner["start_offset_s"] + inner["wall_s"] <= outer["start_offset_s"] + outer["wall_s"] + 1e-9  # one clock: as above


def test_a_cached_run_rolls_up_cached_nodes_without_a_wall_time(runs):
    _, (prompt_id, digest, report) = runs
    outer, inner = report["subgraphs"]
    for rollup in (outer, inner):
        check_rollup_against_rows(rollup, report["nodes"])
        assert rollup["n_cached"] == len(rollup["node_ids"]) and rollup["wall_s"] is None
    assert outer["name"] == "Upscale pass"


def test_the_digest_carries_summary_subgraphs_and_report_urls(server, runs):
    (prompt_id, digest, report), _ = runs
    assert digest["prompt_id"] == prompt_id and digest["status"] == "success"
    assert digest["duration_s"] == report["duration_s"] and digest["n_nodes"] == len(report["nodes"])
    assert [s["id"] for s in digest["subgraphs"]] == ["54", "54:62"]
    assert digest["subgraphs"][0]["wall_s"] == report["subgraphs"][0]["wall_s"]
    assert {n["node_id"] for n in digest["slowest_nodes"]} >= {"54:73", "54:62:174", "54:62:175"}
    assert server.get(digest["report_url"]).json()["prompt_id"] == prompt_id
    assert server.get("/api" + digest["report_html_url"]).status_code == 200


def test_the_trace_and_csv_of_a_real_report(runs, tmp_path):
    from monitors.exporters.csv_tables import subgraphs_csv
    from monitors.exporters.trace import reports_to_trace

    (_, _, report), _ = runs
    trace = reports_to_trace([report])
    spans = {e["args"].get("subgraph_id"): e for e in trace["traceEvents"] if e.get("cat") == "subgraph"}
    assert set(spans) == {"54", "54:62"} and spans["54"]["name"] == "Upscale pass"
    assert subgraphs_csv(report).splitlines()[1].startswith("54,,Upscale pass,")


def test_a_client_gets_its_own_digests_and_none_of_another_clients(server):
    client = client_example()
    mine, theirs = uuid.uuid4().hex, uuid.uuid4().hex
    ws_mine = client.connect(server.url, mine, timeout_s=PROMPT_TIMEOUT_S)
    ws_theirs = client.connect(server.url, theirs, timeout_s=PROMPT_TIMEOUT_S)
    try:
        seed = random.randrange(1, 2**31 - 1)
        first = client.queue(server.url, subgraph_prompt(seed), mine)
        other = client.queue(server.url, subgraph_prompt(seed + 1), theirs)
        assert client.wait_digest(ws_theirs, other)["prompt_id"] == other
        # queued after the other client's digest went out: every digest this client was sent
        # before this one's is in its socket by then (ComfyUI sends its messages in order)
        last = client.queue(server.url, subgraph_prompt(seed + 2), mine)
        digests = []
        while not digests or digests[-1] != last:
            message = ws_mine.recv()
            event = json.loads(message) if isinstance(message, str) else {}
            if event.get("type") == client.DIGEST:
                digests.append(event["data"]["prompt_id"])
        assert digests == [first, last]
        report = client.get_report(server.url, other, wait_s=PROMPT_TIMEOUT_S)
        assert report["subgraphs"][0]["name"] is None and report["subgraphs"][0]["name_unknown_reason"]
    finally:
        ws_mine.close()
        ws_theirs.close()


def test_the_example_script_prints_the_per_node_table(server, tmp_path):
    import subprocess
    import sys

    client_example()
    prompt = tmp_path / "prompt_api.json"
    prompt.write_text(json.dumps(subgraph_prompt(random.randrange(1, 2**31 - 1))))
    done = subprocess.run(
        [sys.executable, str(REPO_ROOT / "docs" / "examples" / "headless_client.py"), str(prompt), "--server", server.url],
        capture_output=True,
        text=True,
        timeout=PROMPT_TIMEOUT_S,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert ": success in " in lines[0] and lines[1].endswith("/report.html")
    assert any(line.startswith("54:62:174") and "PMTestSlow" in line for line in lines)
    assert any(line.startswith("subgraph 54 ") and "3 nodes" in line for line in lines)
