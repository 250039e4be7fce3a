"""The prompt text behind a CONDITIONING, found in the API-format prompt graph, and its statistics.

A monitor only receives tensors; the text that produced them sits in the prompt graph (ComfyUI's
hidden PROMPT): walk upstream from the monitor's input through nodes that pass CONDITIONING along
(ConditioningCombine, ConditioningSetArea, ControlNetApplyAdvanced, ...) to the text encode
node(s): nodes fed by a CLIP. Their STRING inputs are the prompt: a widget value, or a link to a
primitive/string node whose own value is a literal. Text computed at run time by other nodes is
reported as unresolved, with the node that makes it.

Input types come from an optional `input_types(class_type)` callback (the ComfyUI adapter reads
the node definitions); without it, input names decide. The text kept is truncated to
MAX_TEXT_CHARS and always treated as data, never as markup.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping

from ..report import sum_known

MAX_TEXT_CHARS = 2000  # text kept in reports; the full length is recorded next to it
MAX_WALK_NODES = 64  # upstream nodes visited per input: bounded work on any graph
MAX_ENCODERS = 16

# Used when the node definitions are not at hand.
TEXT_INPUT_NAMES = (
    "text",
    "prompt",
    "text_g",
    "text_l",
    "clip_l",
    "clip_g",
    "t5xxl",
    "bert",
    "mt5xl",
    "llama",
)
STRING_VALUE_INPUTS = ("value", "text", "string", "prompt")  # primitive/string nodes
CONDITIONING_INPUT_NAMES = ("positive", "negative", "cond", "conditioning")

_MARKUP = re.compile(r"</?[a-zA-Z!][^<>]*>")
_SCRIPT = re.compile(r"<\s*script\b|javascript\s*:", re.IGNORECASE)

InputTypes = Callable[[str], "Mapping[str, str] | None"]
AddFinding = Callable[[str, str, str], None]  # (level, message, code)


def text_stats(text: str) -> dict:
    """Characters, words, special characters and the (truncated) text itself."""
    n_characters = len(text)
    return {
        "n_characters": n_characters,
        "n_words": len(text.split()),
        # Everything that is neither a letter/digit nor white space: punctuation, weights
        # syntax "(word:1.2)", emphasis, symbols, emoji.
        "n_special_characters": sum(1 for c in text if not c.isalnum() and not c.isspace()),
        "n_utf8_bytes": len(text.encode("utf-8", errors="replace")),
        "n_lines": text.count("\n") + 1 if text else 0,
        "n_non_ascii": sum(1 for c in text if ord(c) > 127),
        "is_blank": not text.strip(),
        "has_markup": bool(_MARKUP.search(text)),
        "has_script": bool(_SCRIPT.search(text)),
        "text": text[:MAX_TEXT_CHARS],
        "text_truncated": n_characters > MAX_TEXT_CHARS,
    }


def unknown_text_stats() -> dict:
    """The keys of text_stats, all unknown (the text could not be found)."""
    return {key: None for key in text_stats("")}


def input_types_from_spec(spec: Mapping) -> dict[str, str]:
    """input name -> type name ("STRING", "CLIP", "COMBO"...) from a node class's INPUT_TYPES()."""
    types = {}
    for section in ("required", "optional"):
        for name, info in (spec.get(section) or {}).items():
            kind = info[0] if isinstance(info, (list, tuple)) and info else None
            types[name] = kind if isinstance(kind, str) else "COMBO"
    return types


def is_link(value) -> bool:
    return (
        isinstance(value, (list, tuple))
        and len(value) == 2
        and isinstance(value[0], (str, int))
        and isinstance(value[1], int)
    )


def _inputs_of(node) -> dict:
    inputs = node.get("inputs") if isinstance(node, Mapping) else None
    return dict(inputs) if isinstance(inputs, Mapping) else {}


def _types_of(
    class_type, inputs: dict, input_types: InputTypes | None, notes: list[str] | None = None
) -> dict[str, str]:
    """input name -> type name: the node definition's, else guessed from names and values (and
    why the definition was not used goes to `notes`)."""
    known: dict[str, str] = {}
    if input_types is not None and isinstance(class_type, str):
        try:
            known = dict(input_types(class_type) or {})
        except Exception as exc:
            known = {}
            note = (
                f"input types of {class_type} unknown ({type(exc).__name__}: {exc}): guessed from input names"
            )
            if notes is not None and note not in notes:
                notes.append(note)
    types = {}
    for name, value in inputs.items():
        if name in known:
            types[name] = known[name]
        elif name == "clip" and is_link(value):
            types[name] = "CLIP"
        elif is_link(value) and (name in CONDITIONING_INPUT_NAMES or name.startswith("conditioning")):
            types[name] = "CONDITIONING"
        elif name in TEXT_INPUT_NAMES and (isinstance(value, str) or is_link(value)):
            types[name] = "STRING"
    return types


def _literal_string_of(
    node, input_types: InputTypes | None, notes: list[str] | None = None
) -> tuple[str | None, str | None]:
    """(input name, text) of a primitive/string node's literal value, else (None, None)."""
    inputs = _inputs_of(node)
    types = _types_of(node.get("class_type"), inputs, input_types, notes)
    for name in STRING_VALUE_INPUTS:
        if isinstance(inputs.get(name), str):
            return name, inputs[name]
    literal = [n for n, v in inputs.items() if isinstance(v, str) and types.get(n) == "STRING"]
    if len(literal) == 1:
        return literal[0], inputs[literal[0]]
    return None, None


def _text_entry(prompt: Mapping, name: str, value, input_types: InputTypes | None) -> dict:
    entry = {
        "input": name,
        "source": "widget",
        "source_node_id": None,
        "source_class_type": None,
        "note": None,
    }
    entry.update(unknown_text_stats())
    if isinstance(value, str):
        entry.update(text_stats(value))
        return entry
    if not is_link(value):  # e.g. bytes from a broken API client: say so instead of guessing
        entry["note"] = f"the input holds a {type(value).__name__}, not text"
        return entry
    source_id = str(value[0])
    source = prompt.get(source_id)
    entry.update(source="linked", source_node_id=source_id)
    if not isinstance(source, Mapping):
        entry["note"] = f"linked to node {source_id}, which is not in the prompt"
        return entry
    entry["source_class_type"] = source.get("class_type")
    type_notes: list[str] = []
    source_input, text = _literal_string_of(source, input_types, type_notes)
    if text is None:
        entry["note"] = "; ".join(
            [
                f"made at run time by node {source_id} ({entry['source_class_type']}): not a literal",
                *type_notes,
            ]
        )
        return entry
    entry["note"] = "; ".join(type_notes) or None
    entry["source_input"] = source_input
    entry.update(text_stats(text))
    return entry


def _encoder_entry(prompt, node_id, class_type, inputs, types, input_types) -> dict:
    texts = [
        _text_entry(prompt, name, value, input_types)
        for name, value in inputs.items()
        if types.get(name) == "STRING" and value is not None
    ]
    return {"node_id": node_id, "class_type": class_type, "texts": texts}


def _next_links(inputs: dict, types: dict, slot: int) -> list:
    names = [n for n, v in inputs.items() if types.get(n) == "CONDITIONING" and is_link(v)]
    if "positive" in names and "negative" in names:
        # Nodes with positive and negative in and out (ControlNetApplyAdvanced, the image-to-video
        # conditioners) output them in that order: follow the one this output carries.
        keep = "negative" if slot == 1 else "positive"
        names = [n for n in names if n not in ("positive", "negative") or n == keep]
    return [inputs[n] for n in names]


def trace_text_encoders(
    prompt: Mapping | None, node_id, input_name: str, input_types: InputTypes | None = None
) -> dict:
    """The text encode nodes upstream of `node_id`'s input, each with its prompt text(s).

    Returns {"encoders": [{"node_id", "class_type", "texts": [...]}], "path": [node ids
    visited], "notes": [why something could not be followed]}.
    """
    result = {"encoders": [], "path": [], "notes": []}
    if not isinstance(prompt, Mapping):
        result["notes"].append("the prompt graph is not available")
        return result
    start = _inputs_of(prompt.get(str(node_id))).get(input_name) if node_id is not None else None
    if not is_link(start):
        result["notes"].append(f"input {input_name!r} of node {node_id} is not linked in the prompt graph")
        return result
    queue, seen = [start], set()
    while queue:
        link = queue.pop(0)
        source_id, slot = str(link[0]), link[1]
        if source_id in seen:
            continue
        if len(seen) >= MAX_WALK_NODES:
            result["notes"].append(f"stopped after {MAX_WALK_NODES} upstream nodes")
            break
        seen.add(source_id)
        result["path"].append(source_id)
        node = prompt.get(source_id)
        if not isinstance(node, Mapping):
            result["notes"].append(f"node {source_id} is not in the prompt graph")
            continue
        class_type = node.get("class_type")
        inputs = _inputs_of(node)
        types = _types_of(class_type, inputs, input_types, result["notes"])
        if any(types.get(n) == "CLIP" and is_link(v) for n, v in inputs.items()):
            if len(result["encoders"]) < MAX_ENCODERS:
                result["encoders"].append(
                    _encoder_entry(prompt, source_id, class_type, inputs, types, input_types)
                )
            continue
        following = _next_links(inputs, types, slot)
        if not following:
            result["notes"].append(
                f"node {source_id} ({class_type}) makes the conditioning without a CLIP input: no prompt text"
            )
        queue.extend(following)
    return result


def attach_texts(side: dict, trace: Mapping | None, where: str, add_finding: AddFinding) -> None:
    """Add to one side of a conditioning step (with its `total_bytes`) the prompt texts of its
    encode nodes (a trace_text_encoders() result whose encoders may carry their "profile"), the
    encode cost per character, and findings about the text (empty, long, markup)."""
    encoders = list((trace or {}).get("encoders") or [])
    side["encoders"] = encoders
    side["text_notes"] = list((trace or {}).get("notes") or ([] if trace else ["no prompt graph given"]))
    texts = [text for encoder in encoders for text in encoder.get("texts", [])]
    for key in ("n_characters", "n_words", "n_special_characters", "n_utf8_bytes"):
        side[key] = sum_known(t.get(key) for t in texts)
    profiles = [e.get("profile") or {} for e in encoders]
    side["encode_duration_s"] = sum_known(p.get("duration_s") for p in profiles)
    peaks = [p.get("peak_rss_bytes") for p in profiles if p.get("peak_rss_bytes") is not None]
    side["encode_peak_rss_bytes"] = max(peaks) if peaks else None
    side["encode_cached"] = any(p.get("cached") for p in profiles) if profiles else None
    chars, duration = side["n_characters"], side["encode_duration_s"]
    side["characters_per_s"] = chars / duration if chars is not None and duration else None
    side["bytes_per_character"] = (
        side["total_bytes"] / chars if side["total_bytes"] is not None and chars else None
    )

    for text in texts:
        label = f"{where}: text {text.get('input')!r} of node {_encoder_of(encoders, text)}"
        if text.get("n_characters") is None:
            add_finding("info", f"{label}: not found ({text.get('note')})", "text_unresolved")
            continue
        if text["is_blank"]:
            level = "warning" if where == "positive" else "info"
            add_finding(level, f"{label} is empty: the encoder gets no prompt", "empty_prompt")
        if text["text_truncated"]:
            add_finding(
                "info",
                f"{label} is {text['n_characters']} characters long; the report keeps the first "
                f"{len(text['text'])}",
                "long_prompt",
            )
        if text["has_script"]:
            add_finding(
                "warning",
                f"{label} contains script markup (<script> or javascript:): pasted by mistake? "
                "The encoder reads it as plain text",
                "script_in_prompt",
            )
        elif text["has_markup"]:
            add_finding(
                "info",
                f"{label} contains HTML-like tags; the encoder reads them as plain text",
                "markup_in_prompt",
            )
    if not encoders:
        notes = "; ".join(side["text_notes"]) or "no text encode node upstream"
        add_finding("info", f"{where}: prompt text not found ({notes})", "text_unresolved")


def _encoder_of(encoders, text) -> str:
    for encoder in encoders:
        if any(t is text for t in encoder.get("texts", [])):
            return f"{encoder.get('node_id')} ({encoder.get('class_type')})"
    return "?"
