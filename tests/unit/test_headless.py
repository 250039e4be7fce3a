"""Headless clients: the run digest (monitors/engine/run_digest.py) sent only to the client id that
queued the prompt (nodes/headless.py), and GET /pipeline_monitor/runs/{id}?wait_s= waiting for a
run that finishes meanwhile (on a real aiohttp app, without ComfyUI)."""

from __future__ import annotations

import asyncio
import importlib
import json

from monitors.engine.run_digest import DIGEST_EVENT, N_SLOWEST, run_digest
from monitors.engine.subgraphs import subgraph_rollups
from monitors.report import Finding, RunReport, StepReport
from tests.unit.test_routes import PACK, client_and_store, import_pack  # noqa: F401 (fixture)
from tests.unit.test_subgraphs import NODES, WORKFLOW, row


def report() -> dict:
    nodes = (*NODES, *(row(str(i), 3.0 + i, 0.01 * i) for i in range(10, 17)))
    step = StepReport("latent", "9", findings=(Finding("warning", "all zeros " * 100, "zeros"),))
    return RunReport(
        "p1", "success", 1.0, 4.0, 3.0, nodes=nodes, steps=(step,), subgraphs=subgraph_rollups(nodes, WORKFLOW)
    ).to_dict()


def test_digest_has_summary_slowest_subgraphs_findings_and_urls():
    digest = run_digest(report())
    json.dumps(digest, allow_nan=False)
    assert digest["prompt_id"] == "p1" and digest["status"] == "success" and digest["duration_s"] == 3.0
    assert [n["node_id"] for n in digest["slowest_nodes"]] == ["3", "54:73", "54:62:174", "16", "15"]
    assert len(digest["slowest_nodes"]) == N_SLOWEST
    assert [s["id"] for s in digest["subgraphs"]] == ["54", "54:62", "60"] and digest["n_subgraphs"] == 3
    assert digest["subgraphs"][0]["name"] == "Upscale pass"
    (finding,) = digest["findings"]
    assert finding["kind"] == "latent" and finding["level"] == "warning" and len(finding["message"]) == 300
    assert digest["report_url"] == "/pipeline_monitor/runs/p1"
    assert digest["report_html_url"] == "/pipeline_monitor/runs/p1/report.html"
    assert digest["peak_gpu_allocated_bytes"] == 40


def test_digest_goes_only_to_the_client_that_queued_the_prompt():
    headless = importlib.import_module(f"{PACK}.nodes.headless") if import_pack() else None
    sent = []
    send = lambda event, data, sid: sent.append((event, data["prompt_id"], sid))  # noqa: E731
    headless.remember_client("p1", {"client_id": "script-a"})
    headless.remember_client("p2", {})  # queued without a client id
    headless.remember_client("p3", {"client_id": 7})
    assert headless.send_digest(report(), send) is True
    assert headless.send_digest({**report(), "prompt_id": "p2"}, send) is False
    assert headless.send_digest({**report(), "prompt_id": "p3"}, send) is False
    assert headless.send_digest(report(), send) is False  # once per run
    assert sent == [(DIGEST_EVENT, "p1", "script-a")]


def test_pending_clients_stay_bounded():
    headless = importlib.import_module(f"{PACK}.nodes.headless") if import_pack() else None
    for i in range(headless.MAX_PENDING + 10):
        headless.remember_client(f"q{i}", {"client_id": "c"})
    assert len(headless._client_of) == headless.MAX_PENDING
    assert "q0" not in headless._client_of


async def test_get_run_waits_for_a_run_that_finishes_meanwhile(client_and_store):  # noqa: F811
    client, recorder, _ = client_and_store
    recorder.begin_run("later-1", {"1": {"class_type": "EmptyImage", "inputs": {}}})
    store, looks = recorder.store, []
    get = store.get
    store.get = lambda run_id: looks.append(run_id) or get(run_id)
    waiting = asyncio.ensure_future(client.get("/pipeline_monitor/runs/later-1?wait_s=600"))
    while len(looks) < 2:  # the route has looked and not found it, and looks again
        await asyncio.sleep(0.01)
    recorder.end_run("success")
    response = await waiting
    assert response.status == 200 and (await response.json())["prompt_id"] == "later-1"


async def test_get_run_wait_is_validated_and_bounded(client_and_store):  # noqa: F811
    client = client_and_store[0]
    for bad in ("abc", "nan", "inf"):
        assert (await client.get(f"/pipeline_monitor/runs/x1?wait_s={bad}")).status == 400
    assert (await client.get("/pipeline_monitor/runs/x1?wait_s=-5")).status == 404  # no wait at all
    assert (await client.get("/pipeline_monitor/runs/x1?wait_s=0.05")).status == 404


async def test_get_run_waits_for_pending_steps_then_answers_the_complete_report(client_and_store):  # noqa: F811
    client, recorder, _ = client_and_store
    store = recorder.store
    pack_report = importlib.import_module(f"{PACK}.monitors.report").RunReport  # the store's own class
    store.add(pack_report("pending-1", "success", 1.0, 2.0, 1.0, complete=False))
    looks = []
    get = store.get
    store.get = lambda run_id: looks.append(run_id) or get(run_id)
    waiting = asyncio.ensure_future(client.get("/pipeline_monitor/runs/pending-1?wait_s=600"))
    while len(looks) < 2:  # found, pending, and looked at again
        await asyncio.sleep(0.01)
    store.replace("pending-1", lambda data: {**data, "complete": True})
    response = await waiting
    assert response.status == 200 and (await response.json())["complete"] is True
    quick = await client.get("/pipeline_monitor/runs/pending-1?wait_s=0")
    assert (await quick.json())["complete"] is True
    store.add(pack_report("pending-2", "success", 1.0, 2.0, 1.0, complete=False))
    answered = await client.get("/pipeline_monitor/runs/pending-2?wait_s=0.05")  # N seconds: as it is
    assert answered.status == 200 and (await answered.json())["complete"] is False


def test_the_digest_says_whether_the_report_is_complete():
    assert run_digest(report())["complete"] is True
    assert run_digest({**report(), "complete": False})["complete"] is False
