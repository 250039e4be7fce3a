"""A real Prometheus (Debian's `prometheus`) scrapes GET /pipeline_monitor/metrics of a pack server
of this test's own, with the scrape config of docs/metrics.md, after four prompts (executed, fully
cached, a monitored VAE encode, a failing one); what PromQL returns equals what the run reports say.

prometheus comes from PROMETHEUS, /usr/bin/prometheus or PATH (.ci/install_tools.sh)."""

from __future__ import annotations

import json
import socket
import subprocess
import time
from collections import Counter, defaultdict

import pytest
import requests
from conftest import session_server
from tool_support import REPO_ROOT, prometheus

pytestmark = pytest.mark.comfyui

JOB = "comfyui"
SCRAPE_TIMEOUT_S = 120  # only catches a hang: a 1 s scrape interval answers within seconds
DEMO = json.loads((REPO_ROOT / "example_workflows" / "api" / "models_profile_demo.json").read_text())
DEMO["4"]["inputs"].update(width=32, height=32)  # the demo at a size that is quick on a CPU
VAE_ENCODE = {
    "1": {
        "class_type": "PMTestNoiseImage",
        "inputs": {"width": 32, "height": 32, "frames": 5, "channels": 3, "seed": 3},
    },
    "2": {"class_type": "VAELoader", "inputs": {"vae_name": "pm_tiny_wan21_vae.safetensors"}},
    "3": {
        "class_type": "PipelineMonitorVAEEncode",
        "inputs": {
            "pixels": ["1", 0],
            "vae": ["2", 0],
            "strategy": "auto",
            "allow_dummy": False,
            "tile_size": 512,
            "overlap": 64,
            "temporal_size": 64,
            "temporal_overlap": 8,
        },
    },
    "4": {"class_type": "PMTestLatentDigest", "inputs": {"samples": ["3", 0]}},
}
FAILING = {
    "1": {"class_type": "EmptyImage", "inputs": {"width": 8, "height": 8, "batch_size": 1, "color": 0}},
    "2": {"class_type": "PMTestRaise", "inputs": {"image": ["1", 0], "message": "pm prometheus"}},
}
SCRAPE_CONFIG = """\
scrape_configs:
  - job_name: {job}
    metrics_path: /pipeline_monitor/metrics
    scrape_interval: 1s
    static_configs:
      - targets: ["{target}"]
        labels:
          pool: test
"""


@pytest.fixture(scope="module")
def prometheus_bin():
    return prometheus()  # first: a missing tool skips (fails in CI) before a server starts


@pytest.fixture(scope="module")
def own_server(prometheus_bin, tmp_path_factory):
    """A server of this module's own: the session server also counts other tests' prompts."""
    yield from session_server(tmp_path_factory)


@pytest.fixture(scope="module")
def reports(own_server):
    out = []
    for prompt, status in ((DEMO, "success"), (DEMO, "success"), (VAE_ENCODE, "success"), (FAILING, "error")):
        prompt_id, history = own_server.run(prompt)
        assert history["status"]["status_str"] == status, history["status"]
        out.append(own_server.get_json(f"/pipeline_monitor/runs/{prompt_id}"))
    assert all(row["cached"] for row in out[1]["nodes"]), out[1]["nodes"]  # the requeued demo
    return out


def loopback_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Prometheus:
    def __init__(self, executable: str, folder, target: str):
        self.folder, self.target = folder, target
        self.url = f"http://127.0.0.1:{loopback_port()}"
        config = folder / "prometheus.yml"
        config.write_text(SCRAPE_CONFIG.format(job=JOB, target=target))
        self.log_path = folder / "prometheus.log"
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen(
                [
                    executable,
                    f"--config.file={config}",
                    f"--storage.tsdb.path={folder / 'data'}",
                    f"--web.listen-address={self.url.removeprefix('http://')}",
                ],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
            )

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-4000:]

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=15)

    def api(self, path: str, **params):
        response = requests.get(self.url + path, params=params, timeout=10)
        response.raise_for_status()
        body = response.json()
        assert body["status"] == "success", body
        return body["data"]

    def wait_until(self, what: str, ready):
        """Polls ready() (None or False while not yet) until it gives a value; a hang fails."""
        deadline = time.monotonic() + SCRAPE_TIMEOUT_S
        last_error = None
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                pytest.fail(f"prometheus exited with {self.process.returncode}:\n{self.log()}")
            try:
                value = ready()
                if value:
                    return value
            except requests.RequestException as exc:  # not listening yet
                last_error = exc
            time.sleep(0.25)
        pytest.fail(f"{what} within {SCRAPE_TIMEOUT_S} s (last error {last_error}):\n{self.log()}")

    def query(self, promql: str) -> list[dict]:
        return self.api("/api/v1/query", query=promql)["result"]


@pytest.fixture(scope="module")
def prom(prometheus_bin, own_server, reports, tmp_path_factory):
    instance = Prometheus(prometheus_bin, tmp_path_factory.mktemp("prometheus"), f"127.0.0.1:{own_server.port}")
    try:

        def target_up():
            targets = instance.api("/api/v1/targets", state="active")["activeTargets"]
            return [t for t in targets if t["scrapePool"] == JOB and t["health"] == "up"]

        (target,) = instance.wait_until("no successful scrape of the pack's metrics", target_up)
        assert target["scrapeUrl"] == f"http://{instance.target}/pipeline_monitor/metrics"
        # Health turns "up" as a scrape ends; its samples are what the queries below read.
        instance.wait_until(
            "no scraped sample queryable", lambda: instance.query("pipeline_monitor_prompt_duration_seconds_count")
        )
        yield instance
    finally:
        instance.stop()


def by_label(results: list[dict], label: str | None = None) -> dict:
    """{label value (or None): float value} of an instant vector, checking every series' target labels."""
    out = {}
    for series in results:
        metric = series["metric"]
        assert metric["job"] == JOB and metric["pool"] == "test", metric
        key = metric.get(label) if label else None
        assert key not in out, results
        out[key] = float(series["value"][1])
    return out


def test_scrape_is_up_with_the_documented_config(own_server, prom):
    up = prom.query(f'up{{job="{JOB}"}}')
    assert by_label(up, "instance") == {f"127.0.0.1:{own_server.port}": 1.0}


def test_prompt_histogram_counts_every_prompt_by_status(prom, reports):
    count = by_label(prom.query("pipeline_monitor_prompt_duration_seconds_count"), "status")
    assert count == dict(Counter(r["status"] for r in reports)) == {"success": 3, "error": 1}
    total = by_label(prom.query("sum by (job, pool) (pipeline_monitor_prompt_duration_seconds_count)"))
    assert total == {None: len(reports)}
    sums = by_label(prom.query("pipeline_monitor_prompt_duration_seconds_sum"), "status")
    for status in count:
        expected = sum(r["duration_s"] for r in reports if r["status"] == status)
        assert sums[status] == pytest.approx(expected, rel=1e-9)
    inf = by_label(prom.query('pipeline_monitor_prompt_duration_seconds_bucket{le="+Inf"}'), "status")
    assert inf == count


def test_node_histograms_and_cached_counter_per_class(prom, reports):
    executed_count, executed_sum, cached = Counter(), defaultdict(float), Counter()
    for report in reports:
        for row in report["nodes"]:
            if row["cached"]:
                cached[row["class_type"]] += 1
            elif row["duration_s"] is not None:
                executed_count[row["class_type"]] += 1
                executed_sum[row["class_type"]] += row["duration_s"]
    assert {"PipelineMonitorModels", "PipelineMonitorVAEEncode", "PMTestRaise"} <= set(executed_count)
    assert cached["PipelineMonitorModels"] >= 1
    count = by_label(prom.query("pipeline_monitor_node_duration_seconds_count"), "class_type")
    assert count == dict(executed_count)
    sums = by_label(prom.query("pipeline_monitor_node_duration_seconds_sum"), "class_type")
    assert sums == pytest.approx(dict(executed_sum), rel=1e-9)
    inf = by_label(prom.query('pipeline_monitor_node_duration_seconds_bucket{le="+Inf"}'), "class_type")
    assert inf == count
    assert by_label(prom.query("pipeline_monitor_nodes_cached_total"), "class_type") == dict(cached)


def test_peak_rss_histogram_and_last_prompt_gauge(prom, reports):
    peaks = [r["span"]["peak_rss_bytes"] for r in reports if r["span"]["peak_rss_bytes"] is not None]
    assert peaks, "no report has a peak RSS"
    assert by_label(prom.query("pipeline_monitor_prompt_peak_rss_bytes_count")) == {None: len(peaks)}
    assert by_label(prom.query("pipeline_monitor_prompt_peak_rss_bytes_sum")) == {
        None: pytest.approx(sum(peaks), rel=1e-9)
    }
    assert by_label(prom.query("pipeline_monitor_last_prompt_peak_rss_bytes")) == {None: peaks[-1]}


def test_vae_encode_counter_by_strategy(prom, reports):
    steps = [s for r in reports for s in r["steps"] if s["kind"] == "vae_encode" and not s["cached"]]
    assert len(steps) == 1
    summary = steps[0]["summary"]
    results = prom.query("pipeline_monitor_vae_encode_total")
    assert len(results) == 1, results
    labels = results[0]["metric"]
    assert (labels["requested"], labels["used"]) == (summary["strategy_requested"], summary["strategy_used"])
    assert float(results[0]["value"][1]) == 1


def test_sampler_gauges_are_scraped(prom):
    rss = by_label(prom.query("pipeline_monitor_process_rss_bytes"))
    assert rss[None] > 0
    assert by_label(prom.query("pipeline_monitor_prompt_running")) == {None: 0.0}
