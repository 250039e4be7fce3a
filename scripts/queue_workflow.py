"""Queue an API-format workflow on a ComfyUI server, wait for it, and print its Pipeline Monitor report.

    python scripts/queue_workflow.py http://127.0.0.1:8188 example_workflows/api/models_profile_demo.json

Prints the report's URL and a short summary (`--save FILE` also writes the report's JSON, for
scripts/compare_reports.py). Exit status: 0 when the run succeeded, 1 when it
failed or no report came back. Standard library only.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import urllib.error
import urllib.request
import uuid


def http_json(url: str, payload: dict | None = None, timeout: float = 10):
    data = None if payload is None else json.dumps(payload).encode()
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return json.loads(response.read().decode())


def named_extra_data(workflow_file: str) -> dict:
    """The prompt's extra data naming its workflow after the file, as the panel names the runs it
    queues (monitors/engine/prompt_info.py workflow_from_extra_data reads it): the Runs list then shows
    "models_profile_demo", not a prompt id."""
    name = os.path.basename(workflow_file)
    return {
        "extra_pnginfo": {
            "workflow": {"id": f"file:{name}", "extra": {"pipeline_monitor_workflow_name": name}}
        }
    }


def queue(base_url: str, prompt: dict, workflow_file: str | None = None) -> str:
    payload = {"prompt": prompt, "client_id": uuid.uuid4().hex}
    if workflow_file:
        payload["extra_data"] = named_extra_data(workflow_file)
    try:
        answer = http_json(f"{base_url}/prompt", payload)
    except urllib.error.HTTPError as exc:
        sys.exit(f"ComfyUI refused the workflow ({exc.code}): {exc.read().decode(errors='replace')[:2000]}")
    return answer["prompt_id"]


def wait_for_report(base_url: str, prompt_id: str, timeout: float) -> dict:
    """The report once /history has the prompt (the pack stores it before ComfyUI adds history),
    complete: a step whose figures come after the prompt (a LoRA file's first analysis) is waited
    for with `?wait_s=` for the time left."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if prompt_id in http_json(f"{base_url}/history/{prompt_id}"):
            left = max(1.0, deadline - time.monotonic())
            url = f"{base_url}/pipeline_monitor/runs/{prompt_id}?wait_s={left:.0f}"
            return http_json(url, timeout=left + 10)
        time.sleep(0.2)
    sys.exit(f"prompt {prompt_id} did not finish within {timeout:.0f} s")


def mib(n) -> str:
    return "?" if n is None else f"{n / 2**20:.1f} MiB"


def seconds(s) -> str:
    return "-" if s is None else f"{s:.3f} s"


def summary_lines(report: dict) -> list[str]:
    span = report.get("span") or {}
    lines = [
        f"status {report['status']} in {seconds(report.get('duration_s'))}, "
        f"peak RSS {mib(span.get('peak_rss_bytes'))} ({span.get('peak_rss_method') or 'unknown method'})",
        f"{'node':>5}  {'class':<24} {'status':<9} {'time':>9}  {'peak RSS':>11}",
    ]
    for row in report.get("nodes", []):
        lines.append(
            f"{row['node_id']:>5}  {str(row.get('class_type')):<24} {row['status']:<9} "
            f"{seconds(row.get('duration_s')):>9}  {mib(row.get('peak_rss_bytes')):>11}"
        )
    for step in report.get("steps", []):
        if step.get("kind") != "models":
            lines.append(f"{step.get('kind')} step (node {step.get('node_id')})")
            continue
        objects = (step.get("details") or {}).get("objects") or {}
        described = ", ".join(
            f"{kind} {info.get('module_class') or info.get('class')} {mib(info.get('size_bytes'))} on {info.get('device')}"
            for kind, info in objects.items()
        )
        loaders = (step.get("summary") or {}).get("loaders_duration_s")
        lines.append(
            f"models step (node {step.get('node_id')}): {described or 'nothing connected'}; loaders {seconds(loaders)}"
        )
    if report.get("error"):
        error = report["error"]
        lines.append(
            f"error in node {error.get('node_id')} ({error.get('node_type')}): {error.get('exception_message')}"
        )
    return lines


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("url", help="ComfyUI base URL, e.g. http://127.0.0.1:8188")
    parser.add_argument("workflow", help="API-format workflow JSON")
    parser.add_argument("--timeout", type=float, default=120, help="seconds to wait for the run")
    parser.add_argument("--save", metavar="FILE", help="also write the report's JSON to FILE")
    args = parser.parse_args(argv)
    base_url = args.url.rstrip("/")
    with open(args.workflow, encoding="utf-8") as f:
        prompt = json.load(f)
    started = time.monotonic()
    prompt_id = queue(base_url, prompt, args.workflow)
    report = wait_for_report(base_url, prompt_id, args.timeout)
    if args.save:
        with open(args.save, "w", encoding="utf-8") as f:
            json.dump(report, f, indent=1, sort_keys=True)
    print(f"Pipeline Monitor report: {base_url}/pipeline_monitor/runs/{prompt_id}")
    print(f"  (round trip {time.monotonic() - started:.2f} s; all runs: {base_url}/pipeline_monitor/runs)")
    for line in summary_lines(report):
        print("  " + line)
    if report.get("complete") is False:
        print("  (incomplete: a step's figures were still being computed after the prompt)")
    return 0 if report.get("status") == "success" else 1


if __name__ == "__main__":
    sys.exit(main())
