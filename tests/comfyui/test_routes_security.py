"""The pack's HTTP surface against the real session server: only the documented routes exist, ids
are validated, file-serving routes never reach outside their folder (raw, encoded and
double-encoded traversal), every pack response has a JSON/HTML/octet-stream (metrics: text) content type with
`nosniff`, and the HTML report escapes every string from the run. Plus: no pickle anywhere."""

from __future__ import annotations

import http.client
import re
from pathlib import Path

import pytest
from aiohttp import web

pytestmark = pytest.mark.comfyui

REPO = Path(__file__).resolve().parents[2]
PREFIXES = ("/pipeline_monitor", "/api/pipeline_monitor")
SECRET = "PM-SECRET-MUST-NOT-LEAK"
XSS_TITLE = "<script>alert('title')</script><img src=x onerror=alert(1)>"
XSS_PROMPT = "a cat <script>alert('prompt')</script> <svg onload=alert(2)> \"quoted\" 'single' &"


def documented_routes() -> set[tuple[str, str]]:
    """(method, path) pairs from the Routes section of docs/routes.md (the README links it)."""
    text = (REPO / "docs" / "routes.md").read_text(encoding="utf-8")
    section = text.split("## Routes", 1)[1].split("\n## ", 1)[0]
    routes = set()
    for methods, path in re.findall(r"`((?:GET|POST)(?:/(?:GET|POST))?) (/pipeline_monitor[^` ]*)", section):
        for method in methods.split("/"):
            routes.add((method, path))
    return routes


def registered_routes(comfy) -> set[tuple[str, str]]:
    routes_mod = comfy.pack_module("nodes.routes")
    table = web.RouteTableDef()
    routes_mod.register(table)
    return {(r.method, r.path) for r in table}


def test_only_documented_routes_exist(server, comfy):  # server first: see conftest import order
    documented = documented_routes()
    assert len(documented) >= 9, documented
    registered = registered_routes(comfy)
    assert registered == documented, (registered - documented, documented - registered)
    # What the pack really added to ComfyUI's table at load time (the stub server's RouteTableDef).
    loaded = {(r.method, r.path) for r in comfy.server.routes if r.path.startswith("/pipeline_monitor")}
    assert loaded == registered


def raw_get(server, path: str) -> tuple[int, dict, bytes]:
    """GET with the path sent exactly as written (no client-side normalisation or re-encoding)."""
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    try:
        connection.putrequest("GET", path, skip_accept_encoding=True)
        connection.endheaders()
        response = connection.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
    finally:
        connection.close()


@pytest.mark.parametrize(
    "path",
    [
        "/pipeline_monitor/admin",
        "/pipeline_monitor/reports",
        "/pipeline_monitor/runs/abc/report.json",
        "/pipeline_monitor/dumps/a/b",
        "/pipeline_monitor/",
    ],
)
def test_undocumented_paths_are_not_found(server, path):
    for prefix in ("", "/api"):
        status, _, body = raw_get(server, prefix + path)
        assert status == 404, (prefix + path, status, body[:200])


@pytest.fixture(scope="module")
def planted_secrets(server):
    """Files the routes must never serve: next to the dumps and reports folders and above them."""
    output = server.base / "output"
    pack = output / "pipeline_monitor"
    (pack / "dumps").mkdir(parents=True, exist_ok=True)
    (pack / "reports").mkdir(parents=True, exist_ok=True)
    planted = [
        output / "secret.safetensors",
        pack / "secret.safetensors",
        pack / "secret.json",
        server.base / "secret.json",
        server.base / "user" / "secret.json",
    ]
    for path in planted:
        path.write_text(SECRET)
    return planted


TRAVERSALS = [
    "../secret.safetensors",
    "..%2fsecret.safetensors",
    "%2e%2e%2fsecret.safetensors",
    "%2E%2E%2Fsecret.safetensors",
    "%252e%252e%252fsecret.safetensors",
    "..%252fsecret.safetensors",
    "..%5csecret.safetensors",
    "%2e%2e%5csecret.safetensors",
    "....//secret.safetensors",
    "%2fetc%2fpasswd",
    "%252fetc%252fpasswd",
    "..%2f..%2fsecret.safetensors",
    "..%2f..%2f..%2fsecret.json",
    "secret.safetensors%00.safetensors",
    "CON.safetensors",
    "%c0%ae%c0%ae%2fsecret.safetensors",
]


@pytest.mark.parametrize("name", TRAVERSALS)
def test_dump_download_cannot_leave_the_dumps_folder(server, planted_secrets, name):
    for prefix in PREFIXES:
        status, headers, body = raw_get(server, f"{prefix}/dumps/{name}")
        assert status in (400, 404), (name, status)
        assert SECRET.encode() not in body
        if status == 404 and body.startswith(b"{"):  # the pack's own answer (not aiohttp's)
            assert headers["x-content-type-options"] == "nosniff"
            assert headers["content-type"].startswith("application/json")


RUN_ID_TRAVERSALS = [
    "..",
    "%2e%2e",
    "..%2fsecret",
    "%2e%2e%2fsecret",
    "%252e%252e%252fsecret",
    "..%2f..%2fsecret",
    "secret%00",
    "%00",
    "x" * 300,
    "a%20b",
    "%c0%ae%c0%ae",
    "..%5csecret",
]


@pytest.mark.parametrize("run_id", RUN_ID_TRAVERSALS)
@pytest.mark.parametrize("suffix", ["", "/report.html"])
def test_report_routes_validate_ids(server, planted_secrets, run_id, suffix):
    for prefix in PREFIXES:
        status, headers, body = raw_get(server, f"{prefix}/runs/{run_id}{suffix}")
        assert status in (400, 404), (run_id, suffix, status)
        assert SECRET.encode() not in body
        if body.startswith(b"{"):
            assert headers["x-content-type-options"] == "nosniff"
            assert headers["content-type"].startswith("application/json")


def xss_prompt() -> dict:
    return {
        "1": {
            "class_type": "PMTestTinyClip",
            "inputs": {"kind": "sd1", "seed": 3},
            "_meta": {"title": XSS_TITLE},
        },
        "2": {
            "class_type": "CLIPTextEncode",
            "inputs": {"text": XSS_PROMPT, "clip": ["1", 0]},
            "_meta": {"title": XSS_TITLE + " encode"},
        },
        "3": {
            "class_type": "PipelineMonitorConditioning",
            "inputs": {"positive": ["2", 0], "clip": ["1", 0]},
            # A lone surrogate (JSON "\\udcff"): undecodable bytes must not break the HTML page.
            "_meta": {"title": XSS_TITLE + " monitor \udcff"},
        },
    }


@pytest.fixture(scope="module")
def xss_run(server):
    prompt_id, history = server.run(xss_prompt())
    assert history["status"]["status_str"] == "success", history["status"]
    return prompt_id


def test_every_pack_response_sets_content_type_and_nosniff(server, xss_run, planted_secrets):
    dumps = server.base / "output" / "pipeline_monitor" / "dumps"
    (dumps / "pm_routes_ok.safetensors").write_bytes(b"not really a dump")
    paths = {
        "/pipeline_monitor/runs": "application/json",
        "/pipeline_monitor/runs?limit=abc": "application/json",
        f"/pipeline_monitor/runs/{xss_run}": "application/json",
        "/pipeline_monitor/runs/pm-unknown-id": "application/json",
        f"/pipeline_monitor/runs/{xss_run}/report.html": "text/html",
        f"/pipeline_monitor/runs/{xss_run}/report.html?download=1": "text/html",
        "/pipeline_monitor/runs/pm-unknown-id/report.html": "application/json",
        "/pipeline_monitor/dumps": "application/json",
        "/pipeline_monitor/dumps/pm_routes_ok.safetensors": "application/octet-stream",
        "/pipeline_monitor/dumps/pm-none.safetensors": "application/json",
        "/pipeline_monitor/live": "application/json",
        "/pipeline_monitor/settings": "application/json",
        "/pipeline_monitor/metrics": "text/plain",  # Prometheus text format
        "/pipeline_monitor/deep_profile": "application/json",
    }
    for path, content_type in paths.items():
        for prefix in ("", "/api"):
            status, headers, _ = raw_get(server, prefix + path)
            assert headers.get("x-content-type-options") == "nosniff", (path, status)
            assert headers["content-type"].startswith(content_type), (path, headers["content-type"])
    import requests

    for path, body in (
        ("/pipeline_monitor/live", b"{bad"),
        ("/pipeline_monitor/settings", b"[1]"),
        ("/pipeline_monitor/deep_profile", b'{"armed": "yes"}'),
    ):
        response = requests.post(server.url + path, data=body, timeout=10)
        assert response.status_code == 400 and response.headers["X-Content-Type-Options"] == "nosniff"
        assert response.headers["Content-Type"].startswith("application/json")


def test_html_report_escapes_every_string_from_the_run(server, xss_run):
    status, headers, body = raw_get(server, f"/pipeline_monitor/runs/{xss_run}/report.html")
    assert status == 200 and headers["content-type"].startswith("text/html")
    page = body.decode("utf-8")
    # ComfyUI's block_external_middleware (--disable-api-nodes) replaces the header's policy with its
    # own; the page's <meta> policy still applies (a browser enforces both), so scripts stay off.
    assert "content-security-policy" in headers
    assert re.search(r'<meta http-equiv="Content-Security-Policy" content="default-src \'none\';', page)
    report = server.get_json(f"/pipeline_monitor/runs/{xss_run}")
    assert any(n.get("title", "").startswith("<script>") for n in report["nodes"]), "titles not in the report"
    assert "&lt;script&gt;alert(" in page and "&lt;img src=x onerror=alert(1)&gt;" in page
    assert re.search(r"<script\b", page, re.IGNORECASE) is None
    assert re.search(r"<(img|svg)\b[^>]*\bon\w+=", page, re.IGNORECASE) is None


# -- no pickle anywhere -------------------------------------------------------------------------------

UNSAFE = [
    re.compile(r"\bimport\s+pickle\b|\bfrom\s+pickle\b|\bpickle\.\w+\(|\bcPickle\b|\bdill\b|\bjoblib\b"),
    re.compile(r"\btorch\.load\s*\("),
    re.compile(r"allow_pickle\s*=\s*True"),
    re.compile(
        r"\bnp\.load\s*\((?![^)]*allow_pickle\s*=\s*False)|\bnumpy\.load\s*\((?![^)]*allow_pickle\s*=\s*False)"
    ),
    re.compile(r"\bload_torch_file\s*\(|\bcomfy\.utils\.load_torch_file\b"),
]


def pack_python_files() -> list[Path]:
    """What ComfyUI loads: the root __init__.py, monitors/ and nodes/ (scripts/ and bench/ are
    developer tools that read only files they generated)."""
    return [
        REPO / "__init__.py",
        *sorted((REPO / "monitors").rglob("*.py")),
        *sorted((REPO / "nodes").rglob("*.py")),
    ]


def test_nothing_in_the_pack_unpickles():
    files = pack_python_files()
    assert any(p.name == "files.py" and p.parent.name == "dumps" for p in files) and len(files) > 20
    hits = []
    for path in files:
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            code = line.split("#", 1)[0]
            if any(p.search(code) for p in UNSAFE):
                hits.append(f"{path.relative_to(REPO)}:{number}: {line.strip()}")
    assert hits == []


def test_the_unpickle_check_catches_what_it_should():
    for bad in (
        "import pickle",
        "x = torch.load(path)",
        "np.load(f, allow_pickle=True)",
        "np.load(f)",
        "sd = comfy.utils.load_torch_file(p)",
    ):
        assert any(p.search(bad) for p in UNSAFE), bad
    assert not any(p.search("np.load(f, allow_pickle=False)") for p in UNSAFE)
