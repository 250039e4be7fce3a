"""GET /pipeline_monitor/dumps[/{name}] on a real aiohttp app: only plain names, only files directly
inside the dumps folder, binary content type, nosniff, 404 JSON otherwise."""

import importlib

import pytest
import torch
from aiohttp import web

from monitors.dumps.collect import collect_tensors
from monitors.dumps.files import write_dump
from tests.unit.test_routes import PACK, import_pack


@pytest.fixture
async def dumps_client(aiohttp_client, tmp_path, monkeypatch):
    routes_mod, _ = import_pack()
    dump_paths = importlib.import_module(f"{PACK}.nodes.dump_paths")
    dumps_dir = tmp_path / "output" / "pipeline_monitor" / "dumps"
    dumps_dir.mkdir(parents=True)
    monkeypatch.setattr(dump_paths, "dumps_dir", lambda: str(dumps_dir))
    table = web.RouteTableDef()
    routes_mod.register(table)
    app = web.Application()
    app.add_routes(table)
    return await aiohttp_client(app), dumps_dir


async def test_download_a_dump(dumps_client):
    client, dumps_dir = dumps_client
    result = write_dump(
        str(dumps_dir), "good", collect_tensors(latent={"samples": torch.ones(1, 4, 2, 2)}), npy=True
    )
    response = await client.get("/pipeline_monitor/dumps/good.safetensors")
    assert response.status == 200
    assert response.headers["X-Content-Type-Options"] == "nosniff"
    assert response.headers["Content-Type"] == "application/octet-stream"
    assert response.headers["Content-Disposition"] == 'attachment; filename="good.safetensors"'
    body = await response.read()
    assert body == (dumps_dir / "good.safetensors").read_bytes() and len(body) == result.file_bytes
    response = await client.get("/pipeline_monitor/dumps/good.latent.samples.npy")
    assert response.status == 200 and response.headers["Content-Type"] == "application/octet-stream"


async def test_list_dumps(dumps_client):
    client, dumps_dir = dumps_client
    write_dump(str(dumps_dir), "one", collect_tensors(image=torch.zeros(1)))
    response = await client.get("/pipeline_monitor/dumps")
    assert response.status == 200 and response.headers["X-Content-Type-Options"] == "nosniff"
    rows = (await response.json())["dumps"]
    assert [r["name"] for r in rows] == ["one.safetensors"] and rows[0]["size_bytes"] > 0


@pytest.mark.parametrize(
    "path",
    [
        "/pipeline_monitor/dumps/missing.safetensors",
        "/pipeline_monitor/dumps/secret.safetensors",  # exists one level up, not in the folder
        "/pipeline_monitor/dumps/..%2Fsecret.safetensors",
        "/pipeline_monitor/dumps/..%2F..%2F..%2Fsecret.safetensors",
        "/pipeline_monitor/dumps/%2e%2e%2fsecret.safetensors",
        "/pipeline_monitor/dumps/%252e%252e%252fsecret.safetensors",
        "/pipeline_monitor/dumps/%252E%252E%252Fsecret.safetensors",
        "/pipeline_monitor/dumps/..%5Csecret.safetensors",
        "/pipeline_monitor/dumps/%2Fetc%2Fpasswd",
        "/pipeline_monitor/dumps/a%00b.safetensors",
        "/pipeline_monitor/dumps/CON.safetensors",
        "/pipeline_monitor/dumps/link.safetensors",  # a symlink in the folder pointing out of it
        "/pipeline_monitor/dumps/notes.txt",  # inside the folder, but not a dump
        "/pipeline_monitor/dumps/.hidden.safetensors",
        "/pipeline_monitor/dumps/" + "x" * 300 + ".safetensors",
    ],
)
async def test_anything_else_is_404_json(dumps_client, path):
    client, dumps_dir = dumps_client
    secret = dumps_dir.parent / "secret.safetensors"
    secret.write_text("LEAK")
    (dumps_dir / "link.safetensors").symlink_to(secret)
    (dumps_dir / "notes.txt").write_text("LEAK")
    (dumps_dir / ".hidden.safetensors").write_text("LEAK")
    (dumps_dir / "CON.safetensors").write_text("LEAK")
    response = await client.get(path)
    assert response.status == 404, path
    assert response.content_type == "application/json"
    assert response.headers["X-Content-Type-Options"] == "nosniff"
    assert "LEAK" not in await response.text()


async def test_raw_traversal_never_reaches_a_file(dumps_client):
    """Unencoded ../ is normalised by the client or router; either way no file outside is served."""
    client, dumps_dir = dumps_client
    (dumps_dir.parent / "secret.safetensors").write_text("LEAK")
    for path in ("/pipeline_monitor/dumps/../secret.safetensors", "/pipeline_monitor/dumps/../../etc/passwd"):
        response = await client.get(path)
        assert response.status == 404
        assert "LEAK" not in await response.text() and "root:" not in await response.text()
