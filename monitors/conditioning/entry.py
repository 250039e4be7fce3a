"""The parts of one CONDITIONING entry, a [cond, extras] pair (analysis.describe_entry puts them
together): the cond tensor's facts and statistics, the pooled output, the extras. Each writes into
the entry's `info` and gives its findings to the caller's `findings.add(level, message, code)`.
"""

from __future__ import annotations

from collections.abc import Mapping

from ..numeric.describe import describe_tensor_bounded

MAX_EXTRA_STR = 100
MAX_EXTRAS = 32  # extras described per entry (ComfyUI adds about a dozen at most)
STATS_EXTRA_PREFIX = "conditioning_"  # extra embeddings (llama3, byt5, lyrics...): NaN-checked too


def is_tensor(value) -> bool:
    return all(hasattr(value, a) for a in ("shape", "dtype", "device", "numel", "element_size"))


def _tensor_brief(tensor) -> dict:
    return {
        "shape": list(tensor.shape),
        "dtype": str(tensor.dtype).replace("torch.", ""),
        "device": str(tensor.device),
        "bytes": int(tensor.numel() * tensor.element_size()),
    }


def stats_tensors(sides, max_entries: int) -> list:
    """The tensors a step takes statistics of, in the order it describes them: per entry of each
    side (the first max_entries) its cond tensor, pooled output and `conditioning_` extras."""
    found = []
    for conditioning in sides:
        entries = conditioning[:max_entries] if isinstance(conditioning, (list, tuple)) else ()
        for entry in entries:
            if not isinstance(entry, (list, tuple)) or len(entry) != 2:
                continue
            cond, extras = entry
            found.extend([cond] if is_tensor(cond) else [])
            if not isinstance(extras, Mapping):
                continue
            found.extend([extras["pooled_output"]] if is_tensor(extras.get("pooled_output")) else [])
            found.extend(v for k, v in _named_extras(extras)[:MAX_EXTRAS] if _takes_stats(k, v))
    return found


def _named_extras(extras: Mapping) -> list[tuple[str, object]]:
    """The extras but pooled_output, by key, in the order they are described."""
    return sorted(((str(k), v) for k, v in extras.items() if k != "pooled_output"), key=lambda kv: kv[0])


def _takes_stats(key: str, value) -> bool:
    """Whether an extra is described with statistics (an extra embedding), not only its shape."""
    return is_tensor(value) and key.startswith(STATS_EXTRA_PREFIX)


def _describe_extra(key: str, value) -> dict:
    if is_tensor(value):
        return describe_tensor_bounded(value) if _takes_stats(key, value) else _tensor_brief(value)
    info = {"type": type(value).__name__}
    if value is None or isinstance(value, (bool, int, float)):
        info["value"] = value
    elif isinstance(value, str):
        info["value"] = value[:MAX_EXTRA_STR]
    elif isinstance(value, (list, tuple, dict, set)):
        info["length"] = len(value)
    return info


def describe_cond(cond, info: dict, label: str, findings) -> dict:
    """The cond tensor's statistics and [batch, tokens, hidden] into `info`, with its checks."""
    # Bounded: a huge (or expanded) tensor gets metadata only instead of minutes of statistics.
    stats = describe_tensor_bounded(cond)
    shape = stats["shape"]
    info.update(stats)
    if stats["stats_skipped"]:
        findings.add("info", f"{label} has {stats['n_elements']} values: statistics skipped", "stats_skipped")
    info["valid"] = True
    info["batch_size"] = shape[0] if len(shape) == 3 else None
    info["n_tokens"] = shape[-2] if len(shape) >= 2 else None
    info["hidden_size"] = shape[-1] if shape else None
    if len(shape) != 3:
        findings.add("warning", f"{label} has shape {shape}, expected [batch, tokens, hidden]", "bad_shape")
    if stats["n_elements"] == 0:
        findings.add("error", f"{label} is an empty tensor (shape {shape})", "empty_tensor")
    if stats["n_nan"]:
        findings.add(
            "error",
            f"{label} has {stats['n_nan']} NaN value(s) of {stats['n_elements']}: "
            "the sampler will produce NaN (black or noise) images",
            "nan_values",
        )
    if stats["n_inf"]:
        findings.add("error", f"{label} has {stats['n_inf']} infinite value(s)", "inf_values")
    if stats["n_elements"] and stats["min"] == 0 and stats["max"] == 0 and not stats["n_nan"]:
        findings.add("info", f"{label} is all zeros (zeroed-out conditioning)", "all_zero")
    return stats


def describe_pooled(pooled, info: dict, label: str, findings) -> None:
    """The pooled output (a tensor or None) into `info`: its statistics, shape and size."""
    info["pooled"] = None
    info["pooled_shape"] = None
    info["pooled_size"] = None
    if is_tensor(pooled):
        info["pooled"] = describe_tensor_bounded(pooled)
        info["pooled_shape"] = info["pooled"]["shape"]
        info["pooled_size"] = info["pooled_shape"][-1] if info["pooled_shape"] else None
        if info["pooled"]["n_nan"] or info["pooled"]["n_inf"]:
            findings.add(
                "error",
                f"{label} pooled output has {info['pooled']['n_nan']} NaN and "
                f"{info['pooled']['n_inf']} infinite value(s)",
                "pooled_nan",
            )
    elif pooled is not None:
        findings.add(
            "warning",
            f"{label} pooled_output is a {type(pooled).__name__}, not a tensor or None",
            "pooled_not_tensor",
        )


def describe_extras(extras: Mapping, info: dict, label: str, findings) -> list[str]:
    """The extras but pooled_output into `info` (the first MAX_EXTRAS); returns all their keys."""
    named_extras = _named_extras(extras)
    extra_keys = [key for key, _ in named_extras]
    info["extra_keys"] = extra_keys[:MAX_EXTRAS]
    info["n_extra_keys"] = len(extra_keys)
    info["extras"] = {key: _describe_extra(key, value) for key, value in named_extras[:MAX_EXTRAS]}
    for key, extra in info["extras"].items():
        if extra.get("n_nan") or extra.get("n_inf"):
            findings.add("error", f"{label} extra {key!r} has NaN or infinite values", "nan_values")
    return extra_keys
