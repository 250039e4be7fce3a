"""The HTTP routes on a real aiohttp app (the pack imported as a package, without ComfyUI)."""

import importlib
import importlib.util
import os
import sys

import pytest
from aiohttp import web

from monitors.engine.sampler import Sampler
from monitors.probes.fake import fake_probes

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PACK = "pm_pack_under_test"


def import_pack():
    if PACK not in sys.modules:
        spec = importlib.util.spec_from_file_location(
            PACK, os.path.join(REPO, "__init__.py"), submodule_search_locations=[REPO]
        )
        module = importlib.util.module_from_spec(spec)
        sys.modules[PACK] = module
        spec.loader.exec_module(module)
    return importlib.import_module(f"{PACK}.nodes.routes"), importlib.import_module(f"{PACK}.nodes.runtime")


@pytest.fixture
async def client_and_store(aiohttp_client, tmp_path):
    routes_mod, runtime_mod = import_pack()
    store_mod = importlib.import_module(f"{PACK}.monitors.engine.store")
    recorder_mod = importlib.import_module(f"{PACK}.monitors.engine.recorder")
    store = store_mod.RunStore(str(tmp_path))
    recorder = recorder_mod.RunRecorder(store, probes=fake_probes())
    previous = runtime_mod.set_runtime(runtime_mod.Runtime(store, recorder, Sampler(probes=fake_probes())))
    table = web.RouteTableDef()
    routes_mod.register(table)
    app = web.Application()
    app.add_routes(table)
    yield await aiohttp_client(app), recorder, tmp_path
    runtime_mod.set_runtime(previous)


async def test_runs_list_and_report(client_and_store):
    client, recorder, _ = client_and_store
    recorder.begin_run("abc-123", {"1": {"class_type": "EmptyImage", "inputs": {}}})
    recorder.node_started("1")
    recorder.node_finished("1")
    recorder.end_run("success")
    response = await client.get("/pipeline_monitor/runs")
    assert response.status == 200 and response.headers["X-Content-Type-Options"] == "nosniff"
    assert response.content_type == "application/json"
    body = await response.json()
    assert [r["prompt_id"] for r in body["runs"]] == ["abc-123"]
    report = await (await client.get("/pipeline_monitor/runs/abc-123")).json()
    assert report["nodes"][0]["class_type"] == "EmptyImage"


@pytest.mark.parametrize(
    "path",
    [
        "/pipeline_monitor/runs/unknown",
        "/pipeline_monitor/runs/..%2F..%2Fsecret",
        "/pipeline_monitor/runs/%252e%252e%252fsecret",
        "/pipeline_monitor/runs/secret.json",
    ],
)
async def test_unknown_or_malformed_ids_are_404_json(client_and_store, path):
    client, _, tmp_path = client_and_store
    (tmp_path.parent / "secret.json").write_text('{"leak": true}')
    response = await client.get(path)
    assert response.status == 404
    assert response.content_type == "application/json"
    assert "leak" not in await response.text()


async def test_limit_is_validated(client_and_store):
    client = client_and_store[0]
    assert (await client.get("/pipeline_monitor/runs?limit=abc")).status == 400
    assert (await client.get("/pipeline_monitor/runs?limit=0")).status == 200
