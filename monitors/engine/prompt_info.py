"""What a prompt and ComfyUI's status messages say, read without keeping them: node classes and
titles, which node feeds an input, the prompt's outcome, the workflow it was queued from and the
nodes served from the cache. ComfyUI 0.8's formats; the recorder and the monitors read them here.
"""

from __future__ import annotations

from collections.abc import Mapping


def node_info_from_prompt(prompt: Mapping | None) -> dict[str, tuple[str | None, str | None]]:
    """node id -> (class_type, title) from an API-format prompt; keeps nothing else of it."""
    info = {}
    if not isinstance(prompt, Mapping):
        return info
    for node_id, node in prompt.items():
        if isinstance(node, Mapping):
            meta = node.get("_meta")
            title = meta.get("title") if isinstance(meta, Mapping) else None
            info[str(node_id)] = (node.get("class_type"), title if isinstance(title, str) else None)
    return info


def upstream_node_ids(node_id: str | None, prompt: Mapping | None, input_names) -> dict[str, str]:
    """input name -> id of the node feeding it, from the API-format prompt."""
    if node_id is None or not isinstance(prompt, Mapping):
        return {}
    node = prompt.get(str(node_id))
    inputs = node.get("inputs") if isinstance(node, Mapping) else None
    if not isinstance(inputs, Mapping):
        return {}
    found = {}
    for name in input_names:
        link = inputs.get(name)
        if isinstance(link, (list, tuple)) and len(link) == 2:
            found[name] = str(link[0])
    return found


def run_outcome(messages) -> tuple[str, dict | None]:
    """(status, error details) of a prompt from its executor's status messages, [(event, data)...]
    as ComfyUI's PromptExecutor keeps them."""
    for event, data in messages:
        if event == "execution_interrupted":
            return "interrupted", {"node_id": data.get("node_id"), "exception_type": "interrupted"}
    for event, data in messages:
        if event == "execution_error":
            return "error", {
                "node_id": data.get("node_id"),
                "node_type": data.get("node_type"),
                "exception_type": data.get("exception_type"),
                "exception_message": str(data.get("exception_message", ""))[:2000],
            }
    if any(event == "execution_success" for event, _ in messages):
        return "success", None
    return "error", {
        "node_id": None,
        "exception_type": "unknown",
        "exception_message": "no final status from ComfyUI",
    }


WORKFLOW_NAME_KEY = "pipeline_monitor_workflow_name"


def workflow_from_extra_data(extra_data) -> dict | None:
    """The workflow a prompt was queued from, as ComfyUI 0.8 passes it: the frontend sends the
    graph as extra_data.extra_pnginfo.workflow, with its `id` but no file name; the panel adds
    the open workflow's name under extra.pipeline_monitor_workflow_name. None without a graph."""
    pnginfo = extra_data.get("extra_pnginfo") if isinstance(extra_data, Mapping) else None
    graph = pnginfo.get("workflow") if isinstance(pnginfo, Mapping) else None
    if not isinstance(graph, Mapping):
        return None
    extra = graph.get("extra") if isinstance(graph.get("extra"), Mapping) else {}
    name = extra.get(WORKFLOW_NAME_KEY)
    name = name.strip()[:200] if isinstance(name, str) and name.strip() else None
    graph_id = graph.get("id")
    return {
        "name": name,
        "id": graph_id if isinstance(graph_id, str) and graph_id else None,
        "name_unknown_reason": None if name else "the prompt's workflow carries no name (queued without the panel)",
    }


def cached_node_ids(messages) -> list[str]:
    """Nodes the executor found in its cache at prompt start (upstream ones never reach a handler)."""
    for event, data in messages:
        if event == "execution_cached":
            return [str(node_id) for node_id in data.get("nodes", [])]
    return []
