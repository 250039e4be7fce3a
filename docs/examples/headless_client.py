"""Queue a prompt on a ComfyUI server that runs Pipeline Monitor, wait for the run's digest on the
websocket, fetch the report and print its per-node table (see docs/headless.md).

    pip install websocket-client
    python headless_client.py prompt_api.json --server http://127.0.0.1:8188

`prompt_api.json`: a workflow exported with "Export (API)" in ComfyUI.
"""

from __future__ import annotations

import argparse
import json
import sys
import urllib.request
import uuid

import websocket  # the websocket-client package, as ComfyUI's own script examples use

DIGEST = "pipeline_monitor.run_digest"


def queue(server: str, prompt: dict, client_id: str, extra_data: dict | None = None) -> str:
    """POST /prompt with our client id: the digest of its run comes to our websocket only."""
    body = {"prompt": prompt, "client_id": client_id, **({"extra_data": extra_data} if extra_data else {})}
    request = urllib.request.Request(
        server + "/prompt", data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=60) as response:
        return json.load(response)["prompt_id"]


def connect(server: str, client_id: str, timeout_s: float = 600) -> websocket.WebSocket:
    ws = websocket.create_connection(server.replace("http", "ws", 1) + f"/ws?clientId={client_id}")
    ws.settimeout(timeout_s)
    return ws


def wait_digest(ws: websocket.WebSocket, prompt_id: str) -> dict:
    """The run digest of `prompt_id` (ComfyUI's own messages and previews are skipped)."""
    while True:
        message = ws.recv()
        if isinstance(message, bytes):
            continue  # a preview image
        event = json.loads(message)
        if event.get("type") == DIGEST and event["data"].get("prompt_id") == prompt_id:
            return event["data"]


def get_report(server: str, prompt_id: str, wait_s: float = 60) -> dict:
    """The whole run report; waits up to wait_s for a run that has not finished yet."""
    url = f"{server}/pipeline_monitor/runs/{prompt_id}?wait_s={wait_s}"
    with urllib.request.urlopen(url, timeout=wait_s + 30) as response:
        return json.load(response)


def _mib(value) -> str:
    return "-" if value is None else f"{value / 2**20:.1f}"


def node_table(report: dict) -> str:
    """One line per node: id, class, status, time, RSS it added, and the subgraph it ran in."""
    names = {s["id"]: s["name"] or f"subgraph {s['id']}" for s in report.get("subgraphs", [])}
    lines = [f"{'node':<14} {'class':<24} {'status':<9} {'time s':>8} {'RSS+ MiB':>9}  subgraph"]
    for node in report["nodes"]:
        node_id = node["node_id"]
        seconds = "-" if node["duration_s"] is None else f"{node['duration_s']:.3f}"
        where = names.get(node_id.rpartition(":")[0], "")
        lines.append(
            f"{node_id:<14} {str(node['class_type'])[:24]:<24} {node['status']:<9} {seconds:>8} "
            f"{_mib(node.get('peak_rss_above_start_bytes')):>9}  {where}"
        )
    for s in report.get("subgraphs", []):
        wall = "-" if s["wall_s"] is None else f"{s['wall_s']:.3f}"
        lines.append(f"subgraph {s['id']:<5} {names[s['id']][:24]:<24} {len(s['node_ids'])} nodes {wall:>8} s wall")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("prompt", help="API-format prompt JSON file")
    parser.add_argument("--server", default="http://127.0.0.1:8188")
    args = parser.parse_args()
    with open(args.prompt, encoding="utf-8") as f:
        prompt = json.load(f)
    client_id = uuid.uuid4().hex
    ws = connect(args.server, client_id)  # before queueing, so no message is missed
    try:
        prompt_id = queue(args.server, prompt, client_id)
        digest = wait_digest(ws, prompt_id)
    finally:
        ws.close()
    sys.stdout.write(f"prompt {prompt_id}: {digest['status']} in {digest['duration_s']:.2f} s\n")
    sys.stdout.write(f"report: {args.server}{digest['report_html_url']}\n")
    sys.stdout.write(node_table(get_report(args.server, prompt_id)) + "\n")


if __name__ == "__main__":
    main()
