"""Collecting the tensors of a CONDITIONING / LATENT / IMAGE value for a dump, with stable names:
cond.<i>.tensor, cond.<i>.<key> (pooled_output, reference_latents.<j>, ...), latent.<key>
(samples, noise_mask, ...), image. Plain values (guidance, batch_index) are kept as short text;
anything else (hooks, control objects) is listed by type, never dumped. Nothing is copied here.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger(__name__)

MAX_DEPTH = 4  # nesting followed inside conditioning dicts and lists
MAX_ITEMS = 256  # entries followed per list or dict
MAX_EXTRA_CHARS = 500


def _is_tensor(value: Any) -> bool:
    return all(hasattr(value, a) for a in ("shape", "dtype", "device", "numel", "element_size", "detach"))


@dataclass
class CollectedTensors:
    tensors: dict[str, Any] = field(default_factory=dict)  # stable name -> tensor
    extras: dict[str, str] = field(default_factory=dict)  # name -> short text of a plain value
    skipped: dict[str, str] = field(default_factory=dict)  # name -> type of what was not dumped

    def _unique(self, name: str) -> str:
        if name not in self.tensors and name not in self.extras and name not in self.skipped:
            return name
        n = 2
        while f"{name}_{n}" in self.tensors or f"{name}_{n}" in self.extras or f"{name}_{n}" in self.skipped:
            n += 1
        return f"{name}_{n}"

    def add(self, name: str, value: Any, depth: int = 0) -> None:
        if value is None:
            return
        if _is_tensor(value):
            self.tensors[self._unique(name)] = value
        elif getattr(value, "is_nested", False) is True and isinstance(getattr(value, "tensors", None), list):
            for i, part in enumerate(value.tensors[:MAX_ITEMS]):
                self.add(f"{name}.{i}", part, depth + 1)
        elif isinstance(value, (bool, int, float, str)):
            self.extras[self._unique(name)] = str(value)[:MAX_EXTRA_CHARS]
        elif isinstance(value, (list, tuple)) and all(isinstance(v, (bool, int, float, str)) for v in value):
            self.extras[self._unique(name)] = json.dumps(list(value))[:MAX_EXTRA_CHARS]
        elif isinstance(value, (list, tuple)) and depth < MAX_DEPTH:
            for i, item in enumerate(value[:MAX_ITEMS]):
                self.add(f"{name}.{i}", item, depth + 1)
        elif isinstance(value, Mapping) and depth < MAX_DEPTH:
            for key, item in list(value.items())[:MAX_ITEMS]:
                self.add(f"{name}.{safe_key(key)}", item, depth + 1)
        else:
            self.skipped[self._unique(name)] = type(value).__name__

    @property
    def total_bytes(self) -> int:
        return sum(int(t.numel()) * int(t.element_size()) for t in self.tensors.values())


def safe_key(key: object) -> str:
    """A dict key as a name part: letters, digits and '_' only (names also become .npy file names)."""
    text = re.sub(r"[^A-Za-z0-9_]", "_", str(key))[:64]
    return text or "_"


def collect_tensors(conditioning=None, latent=None, image=None) -> CollectedTensors:
    """Every tensor of the values, named cond.<i>.tensor, cond.<i>.<key>, latent.<key>, image."""
    collected = CollectedTensors()
    if conditioning is not None:
        if isinstance(conditioning, (list, tuple)):
            for i, entry in enumerate(conditioning[:MAX_ITEMS]):
                if isinstance(entry, (list, tuple)) and len(entry) >= 2 and isinstance(entry[1], Mapping):
                    collected.add(f"cond.{i}.tensor", entry[0])
                    for key, value in list(entry[1].items())[:MAX_ITEMS]:
                        collected.add(f"cond.{i}.{safe_key(key)}", value, depth=1)
                else:
                    collected.skipped[f"cond.{i}"] = type(entry).__name__
        else:
            collected.skipped["cond"] = type(conditioning).__name__
    if latent is not None:
        if isinstance(latent, Mapping):
            for key, value in list(latent.items())[:MAX_ITEMS]:
                collected.add(f"latent.{safe_key(key)}", value, depth=1)
        else:
            collected.skipped["latent"] = type(latent).__name__
    if image is not None:
        if _is_tensor(image):
            collected.tensors["image"] = image
        else:
            collected.skipped["image"] = type(image).__name__
    return collected


def guess_encoder_family(conditioning) -> str | None:
    """Text-encoder family of the first conditioning entry: the conditioning monitor's answer for
    these very tensors when it saw them (it knows the CLIP's class), else from the shape;
    None when unknown or not a CONDITIONING."""
    try:
        from ..conditioning.family import family_from_shape, remembered_family

        cond, extras = conditioning[0][0], conditioning[0][1]
        guess = remembered_family(cond)
        if guess is not None and guess.get("confidence") != "unknown":
            return f"{guess['family']} ({guess['confidence']})"
        pooled = extras.get("pooled_output")
        guess = family_from_shape(
            int(cond.shape[-1]),
            int(pooled.shape[-1]) if _is_tensor(pooled) else None,
            int(cond.shape[-2]) if len(cond.shape) >= 2 else None,
            [str(k) for k in extras],
        )
    except Exception as exc:  # anything unexpected in the value: the family stays unknown
        log.debug("pipeline monitor: no encoder family for the dump: %s", exc)
        return None
    if guess.get("confidence") == "unknown":
        return None
    return f"{guess['family']} ({guess['confidence']})"
