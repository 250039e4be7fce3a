"""Live view pushes, the settings route and the HTML report route on a real aiohttp app."""

import importlib
import sys
import types

import pytest
from aiohttp import web

from monitors.engine.sampler import Sampler
from monitors.probes.fake import fake_probes
from tests.unit.test_routes import PACK, import_pack


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def pack(name):
    import_pack()
    return importlib.import_module(f"{PACK}.{name}")


@pytest.fixture
def sent():
    return []


@pytest.fixture
def live_setup(sent):
    live = pack("monitors.engine.live")
    clock = Clock()
    connected = {"a", "b"}
    watchers = live.LiveWatchers(
        lambda event, data, sid: sent.append((event, data, sid)), lambda sid: sid in connected, clock=clock
    )
    store_mod = pack("monitors.engine.store")
    recorder = pack("monitors.engine.recorder").RunRecorder(store_mod.RunStore(None), probes=fake_probes())
    sampler = Sampler(probes=fake_probes())
    sampler.ensure_started = lambda: None  # ticks are driven by the test
    return live, watchers, sampler, recorder, clock, connected


def test_pushes_go_to_watching_clients_only_with_the_executing_node(live_setup, sent):
    live, watchers, sampler, recorder, _, _ = live_setup
    sampler.sample_once()
    assert sent == [] and sampler.sink_count() == 0
    watchers.watch("a", True, sampler, recorder)
    assert sampler.sink_count() == 1
    recorder.begin_run("p1", {"7": {"class_type": "KSampler", "inputs": {}, "_meta": {"title": "<b>x</b>"}}})
    recorder.node_started("7")
    sampler.sample_once()
    recorder.node_finished("7")
    recorder.end_run("success")
    assert [(e, sid) for e, _, sid in sent] == [(live.EVENT, "a")]
    data = sent[0][1]
    assert data["node"] == {"node_id": "7", "class_type": "KSampler", "title": "<b>x</b>"}
    assert data["prompt_id"] == "p1" and data["process_rss_bytes"] > 0 and "unix_time_s" in data
    sampler.sample_once()
    assert sent[-1][1]["node"] is None and sent[-1][1]["prompt_id"] is None


def test_stopping_expiry_and_closed_sockets_remove_the_sink(live_setup, sent):
    _, watchers, sampler, recorder, clock, connected = live_setup
    watchers.watch("a", True, sampler, recorder)
    watchers.watch("b", True, sampler, recorder)
    watchers.watch("a", False, sampler, recorder)
    assert watchers.clients() == ["b"] and sampler.sink_count() == 1
    connected.discard("b")  # its tab closed: the websocket is gone
    sampler.sample_once()
    assert sent == [] and sampler.sink_count() == 0 and not watchers.attached
    connected.add("b")
    watchers.watch("b", True, sampler, recorder)
    clock.now += live_setup[0].WATCH_TTL_S - 1
    sampler.sample_once()
    assert len(sent) == 1
    clock.now += 2  # stopped renewing
    sampler.sample_once()
    assert len(sent) == 1 and sampler.sink_count() == 0


def test_watchers_are_bounded(live_setup):
    live, watchers, sampler, recorder, clock, connected = live_setup
    watchers._connected = lambda sid: None
    for i in range(live.MAX_WATCHERS + 5):
        clock.now += 0.1  # all still within their expiry; the oldest is dropped
        watchers.watch(f"c{i}", True, sampler, recorder)
    assert len(watchers.clients()) == live.MAX_WATCHERS and "c0" not in watchers.clients()


@pytest.fixture
async def client(aiohttp_client, tmp_path):
    routes_mod, runtime_mod = import_pack()
    live, live_glue = pack("monitors.engine.live"), pack("nodes.live")
    store = pack("monitors.engine.store").RunStore(str(tmp_path))
    recorder = pack("monitors.engine.recorder").RunRecorder(store, probes=fake_probes())
    sampler = Sampler(probes=fake_probes())
    sampler.ensure_started = lambda: None
    runtime = runtime_mod.Runtime(store, recorder, sampler)
    previous = runtime_mod.set_runtime(runtime)
    sent = []
    previous_watchers = live_glue.set_watchers(
        live.LiveWatchers(lambda e, d, sid: sent.append((e, sid)), lambda sid: sid != "gone")
    )
    table = web.RouteTableDef()
    routes_mod.register(table)
    app = web.Application()
    app.add_routes(table)
    yield await aiohttp_client(app), runtime, sent
    runtime_mod.set_runtime(previous)
    live_glue.set_watchers(previous_watchers)


@pytest.mark.parametrize(
    "body",
    [
        {"client_id": "", "watching": True},
        {"client_id": "../x", "watching": True},
        {"client_id": "x" * 129, "watching": True},
        {"client_id": "abc", "watching": "yes"},
        {"client_id": 5, "watching": True},
        ["abc", True],
    ],
)
async def test_live_route_validates(client, body):
    client, runtime, _ = client
    response = await client.post("/pipeline_monitor/live", json=body)
    assert response.status == 400 and "error" in await response.json()
    assert runtime.sampler.sink_count() == 0


async def test_live_route_refuses_a_client_without_a_websocket(client):
    client, runtime, _ = client
    response = await client.post("/pipeline_monitor/live", json={"client_id": "gone", "watching": True})
    assert response.status == 404 and runtime.sampler.sink_count() == 0


async def test_live_route_watch_backfill_and_stop(client):
    client, runtime, sent = client
    for _ in range(3):
        runtime.sampler.sample_once()
    response = await client.post("/pipeline_monitor/live", json={"client_id": "tab-1", "watching": True})
    body = await response.json()
    assert response.status == 200 and body["n_watchers"] == 1 and body["sink_attached"] is True
    assert len(body["points"]) == 3 and body["sample_interval_ms"] == 500
    runtime.sampler.sample_once()
    assert sent == [("pipeline_monitor.sample", "tab-1")]
    status = await (await client.get("/pipeline_monitor/live")).json()
    assert status["n_watchers"] == 1
    response = await client.post("/pipeline_monitor/live", json={"client_id": "tab-1", "watching": False})
    assert (await response.json())["sink_attached"] is False and runtime.sampler.sink_count() == 0


async def test_settings_get_validate_apply(client):
    client, runtime, _ = client
    before = await (await client.get("/pipeline_monitor/settings")).json()
    assert before == {
        "sample_interval_ms": 500,
        "max_runs": 50,
        "max_report_files": 500,
        "profile_enabled": True,
    }
    for bad in (
        {"sample_interval_ms": 10},
        {"sample_interval_ms": "500"},
        {"max_runs": 2.5},
        {"max_runs": True},
        {"profile_enabled": 1},
        {"unknown": 1},
        {"max_runs": 3, "max_report_files": 0},
        [1],
    ):
        response = await client.post("/pipeline_monitor/settings", json=bad)
        assert response.status == 400, bad
    assert await (await client.get("/pipeline_monitor/settings")).json() == before  # nothing applied
    changes = {"sample_interval_ms": 1000, "max_runs": 3, "max_report_files": 7, "profile_enabled": False}
    response = await client.post("/pipeline_monitor/settings", json=changes)
    assert response.status == 200 and await response.json() == changes
    assert runtime.sampler.interval_s == 1.0 and runtime.store.max_runs == 3
    assert runtime.store.max_files == 7 and runtime.recorder.profile_enabled is False
    bad_json = await client.post(
        "/pipeline_monitor/settings", data=b"{", headers={"Content-Type": "application/json"}
    )
    assert bad_json.status == 400


async def test_html_report_route(client):
    client, runtime, _ = client
    recorder = runtime.recorder
    evil = "<img src=x onerror=alert(1)>"
    recorder.begin_run(
        "run-1", {"1": {"class_type": "CLIPTextEncode", "inputs": {}, "_meta": {"title": evil}}}
    )
    recorder.node_started("1")
    recorder.node_finished("1")
    recorder.end_run("success")
    response = await client.get("/pipeline_monitor/runs/run-1/report.html")
    assert response.status == 200
    assert response.headers["Content-Type"] == "text/html; charset=utf-8"
    assert response.headers["X-Content-Type-Options"] == "nosniff"
    csp = response.headers["Content-Security-Policy"]
    assert "default-src 'none'" in csp and "script-src" not in csp
    text = await response.text()
    assert evil not in text and "&lt;img src=x onerror=alert(1)&gt;" in text
    download = await client.get("/pipeline_monitor/runs/run-1/report.html?download=1")
    assert "attachment" in download.headers["Content-Disposition"]
    for bad in ("unknown", "..%2Fsecret", "a.b"):
        missing = await client.get(f"/pipeline_monitor/runs/{bad}/report.html")
        assert missing.status == 404 and missing.content_type == "application/json"


@pytest.mark.parametrize(
    "instance, expected",
    [
        ({"sockets": {"a": object()}}, {"a": True, "b": False}),  # ComfyUI's socket table
        ({}, {"a": None, "b": None}),  # a server without one: unknown
        (None, {"a": None, "b": None}),  # outside a running ComfyUI: unknown
    ],
    ids=["sockets", "no-table", "no-server"],
)
def test_the_glue_reads_comfyuis_socket_table_and_last_node(monkeypatch, instance, expected):
    live_glue = pack("nodes.live")
    if instance is None:
        monkeypatch.setitem(sys.modules, "server", None)  # importing it raises ImportError
    else:
        server = types.ModuleType("server")
        server.PromptServer = types.SimpleNamespace(instance=types.SimpleNamespace(last_node_id="7", **instance))
        monkeypatch.setitem(sys.modules, "server", server)
        assert live_glue._last_node_id() == "7"
    assert {sid: live_glue._server_connected(sid) for sid in expected} == expected
