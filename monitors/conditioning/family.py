"""Which text encoder family produced a CONDITIONING: from its shape, or from the CLIP's class.

The shape rules follow the text encoders of ComfyUI 0.8 (hidden size D of [batch, tokens, D],
pooled output size, the length the tokenizer pads to, and marker extras such as
`conditioning_llama3`). Several families share a shape, so the answer carries its candidates and
a confidence; the class of `clip.cond_stage_model` is the most reliable source when a CLIP is
at hand.
"""

from __future__ import annotations

import threading
import weakref
from dataclasses import dataclass

ANY_POOLED = "any"  # the family has a pooled output whose size varies


@dataclass(frozen=True)
class FamilyRule:
    family: str
    encoder: str
    hidden: int
    pooled: int | str | None  # pooled output size; None = no pooled output; ANY_POOLED
    padded_to: int = 1  # the tokenizer pads to at least this many tokens (1: free length)
    multiple_of: int | None = None  # token count is always a multiple (77-token CLIP chunks)
    exact_tokens: int | None = None  # the tokenizer always gives exactly this many tokens
    marker: str | None = None  # an extra key only this family's encoder adds

    def tokens_possible(self, n_tokens: int | None) -> bool:
        if n_tokens is None:
            return True
        if self.exact_tokens is not None:
            return n_tokens == self.exact_tokens
        if self.multiple_of and n_tokens % self.multiple_of:
            return False
        return n_tokens >= self.padded_to

    def tokens_exact(self, n_tokens: int | None) -> bool:
        """The token count is the one this family gives for a short prompt."""
        if n_tokens is None:
            return False
        if self.exact_tokens is not None:
            return n_tokens == self.exact_tokens
        return self.padded_to > 1 and n_tokens == self.padded_to


# Order matters only among equally good matches: the more specific family comes first.
FAMILY_RULES: tuple[FamilyRule, ...] = (
    FamilyRule("SD1.x", "CLIP-L", 768, 768, padded_to=77, multiple_of=77),
    FamilyRule("SD2.x", "OpenCLIP-H", 1024, 1024, padded_to=77, multiple_of=77),
    FamilyRule("SDXL", "CLIP-L + OpenCLIP-G", 2048, 1280, padded_to=77, multiple_of=77),
    FamilyRule("SDXL refiner / Stable Cascade", "OpenCLIP-G", 1280, 1280, padded_to=77, multiple_of=77),
    FamilyRule(
        "HiDream", "T5-XXL + Llama-3.1-8B", 4096, 2048, exact_tokens=128, marker="conditioning_llama3"
    ),
    FamilyRule("SD3", "CLIP-L + CLIP-G + T5-XXL", 4096, 2048, padded_to=154),
    FamilyRule("Flux.1", "T5-XXL + CLIP-L", 4096, 768, padded_to=256),
    FamilyRule("HunyuanVideo 1.0", "Llama-3-8B + CLIP-L", 4096, 768),
    FamilyRule("WAN 2.1/2.2", "umT5-XXL", 4096, None, padded_to=512),
    FamilyRule("Mochi", "T5-XXL", 4096, None, padded_to=256),
    FamilyRule("LTXV 0.9", "T5-XXL", 4096, None, padded_to=128),
    FamilyRule("Chroma / PixArt", "T5-XXL", 4096, None),
    FamilyRule("Flux.2", "Mistral-3-24B", 15360, None),
    FamilyRule("Cosmos", "T5 v1.0", 1024, None, padded_to=512),
    FamilyRule("HunyuanDiT", "BERT + mT5-XL", 1024, ANY_POOLED, padded_to=77, marker="conditioning_mt5xl"),
    FamilyRule("LTX-2", "Gemma-3-12B", 7680, None),
    FamilyRule(
        "HunyuanVideo 1.5 / HunyuanImage 2.1",
        "Qwen2.5-VL-7B + ByT5",
        3584,
        None,
        marker="conditioning_byt5small",
    ),
    FamilyRule("Qwen-Image", "Qwen2.5-VL-7B", 3584, None),
    FamilyRule("Kandinsky 5", "Qwen2.5-VL-7B + CLIP-L", 3584, 768),
    FamilyRule("AuraFlow", "Pile-T5-XL", 2048, None, padded_to=256),
    FamilyRule("Omnigen2 / Ovis", "Qwen2.5-3B / Ovis-2.5", 2048, None),
    FamilyRule("ACE-Step", "umT5-base", 768, None, marker="conditioning_lyrics"),
    FamilyRule("Stable Audio", "T5-base", 768, None, padded_to=128),
    FamilyRule("NewBie", "Gemma-3-4B + Jina CLIP", 2560, 1024),
    FamilyRule("Z-Image", "Qwen3-4B", 2560, None),
    FamilyRule("Lumina 2", "Gemma-2-2B", 2304, None),
)

RULES_BY_FAMILY = {rule.family: rule for rule in FAMILY_RULES}

# Class names of `clip.cond_stage_model` (or a base class) -> the families it serves. Classes
# ComfyUI makes on the fly end in "_" and are skipped in favour of their named base class.
ENCODER_CLASS_FAMILIES: dict[str, tuple[str, ...]] = {
    "SD1ClipModel": ("SD1.x",),
    "SD2ClipModel": ("SD2.x",),
    "SDXLClipModel": ("SDXL",),
    "SDXLRefinerClipModel": ("SDXL refiner / Stable Cascade",),
    "StableCascadeClipModel": ("SDXL refiner / Stable Cascade",),
    "SD3ClipModel": ("SD3",),
    "FluxClipModel": ("Flux.1",),
    "Flux2TEModel": ("Flux.2",),
    "PixArtT5XXL": ("Chroma / PixArt",),
    "MochiT5XXL": ("Mochi", "LTXV 0.9"),
    "WanTEModel": ("WAN 2.1/2.2",),
    "WanT5Model": ("WAN 2.1/2.2",),
    "CosmosT5XXL": ("Cosmos",),
    "LTXAVTEModel": ("LTX-2",),
    "HunyuanVideoClipModel": ("HunyuanVideo 1.0",),
    "HunyuanImageTEModel": ("HunyuanVideo 1.5 / HunyuanImage 2.1",),
    "Kandinsky5TEModel": ("Kandinsky 5",),
    "QwenImageTEModel": ("Qwen-Image",),
    "HiDreamTEModel": ("HiDream",),
    "AuraT5Model": ("AuraFlow",),
    "SAT5Model": ("Stable Audio",),
    "ZImageTEModel": ("Z-Image",),
    "NewBieTEModel": ("NewBie",),
    "LuminaModel": ("Lumina 2",),
    "Omnigen2Model": ("Omnigen2 / Ovis",),
    "OvisTEModel": ("Omnigen2 / Ovis",),
    "HyditModel": ("HunyuanDiT",),
    "AceT5Model": ("ACE-Step",),
}


def unknown_family(hidden: int | None) -> str:
    return f"unknown (hidden {hidden})"


def _pooled_matches(rule: FamilyRule, pooled_size: int | None) -> bool:
    if rule.pooled == ANY_POOLED:
        return pooled_size is not None
    return rule.pooled == pooled_size


def family_from_shape(
    hidden: int | None, pooled_size: int | None, n_tokens: int | None, extra_keys=()
) -> dict:
    """The family a conditioning of this shape comes from, with the other possible ones.

    confidence: "exact" (a marker extra, or the padded length of a short prompt), "likely"
    (one family fits shape and length, the length that of a longer prompt), "ambiguous" (hidden
    and pooled sizes fit several families and the token count singles none out, or fits none),
    "unknown" (no family has this hidden/pooled size). `candidates` lists the other families.
    """
    extra_keys = set(extra_keys)
    shaped = [r for r in FAMILY_RULES if r.hidden == hidden and _pooled_matches(r, pooled_size)]
    possible = [r for r in shaped if r.tokens_possible(n_tokens) and (not r.marker or r.marker in extra_keys)]
    marked = [r for r in shaped if r.marker and r.marker in extra_keys]
    exact = [r for r in possible if r.tokens_exact(n_tokens)]
    if marked:
        chosen, confidence = marked[0], "exact"
    elif exact:
        chosen, confidence = exact[0], "exact"
    elif possible:
        # The family that pads the most explains a long prompt best (a 600-token T5 prompt is
        # more likely WAN's 512 grown than a free-length encoder's), but when other families give
        # the same hidden/pooled sizes and length the shape cannot tell them apart: say so.
        chosen = max(possible, key=lambda r: r.padded_to)
        confidence = "likely" if len(possible) == 1 else "ambiguous"
    elif shaped:
        chosen, confidence = shaped[0], "ambiguous"
    else:
        return {
            "family": unknown_family(hidden),
            "encoder": None,
            "confidence": "unknown",
            "candidates": [],
            "basis": "shape",
        }
    candidates = [r.family for r in (possible or shaped) if r is not chosen]
    return {
        "family": chosen.family,
        "encoder": chosen.encoder,
        "confidence": confidence,
        "candidates": candidates,
        "basis": "shape",
    }


def encoder_class_names(cond_stage_model) -> list[str]:
    """Class names of the encoder object and its bases, most specific first."""
    return [cls.__name__ for cls in type(cond_stage_model).__mro__ if cls is not object]


def families_from_encoder_class(cond_stage_model) -> tuple[str, ...]:
    """Families the CLIP's encoder class serves, () when the class is not known."""
    for name in encoder_class_names(cond_stage_model):
        if name.endswith("_"):  # made on the fly by ComfyUI: its base class says more
            continue
        if name in ENCODER_CLASS_FAMILIES:
            return ENCODER_CLASS_FAMILIES[name]
    return ()


def identify_family(shape_family: dict, encoder_families: tuple[str, ...]) -> dict:
    """Combine the shape's answer with the CLIP class's: the class wins where it is known."""
    if not encoder_families:
        return dict(shape_family)
    if shape_family["family"] in encoder_families:
        family = shape_family["family"]
    else:
        family = " / ".join(encoder_families)
    rule = RULES_BY_FAMILY.get(family) or RULES_BY_FAMILY.get(encoder_families[0])
    return {
        "family": family,
        "encoder": None if rule is None else rule.encoder,
        "confidence": "exact" if len(encoder_families) == 1 or family == shape_family["family"] else "likely",
        "candidates": [f for f in encoder_families if f != family],
        "basis": "clip class",
        "shape_family": shape_family["family"],
    }


# -- families identified by the conditioning monitor, for later readers of the same tensors ----------
# The conditioning monitor sees the CLIP (its class names the family exactly); a dump of the same
# CONDITIONING further down the graph sees only the tensors. The monitor passes its inputs through
# as the very same objects, so the family is remembered per cond tensor, through a weak reference
# (no tensor is kept alive), and a dump of that tensor reuses it.
MAX_REMEMBERED_FAMILIES = 256
_remembered: dict[int, tuple[weakref.ref, dict]] = {}
_remembered_lock = threading.Lock()


def remember_family(cond, family: dict) -> None:
    """Note the family identified for a conditioning tensor (no-op for objects without weakrefs)."""
    try:
        ref = weakref.ref(cond)
    except TypeError:
        return
    with _remembered_lock:
        _remembered.pop(id(cond), None)
        _remembered[id(cond)] = (ref, dict(family))
        for key in [k for k, (r, _f) in _remembered.items() if r() is None]:
            del _remembered[key]
        while len(_remembered) > MAX_REMEMBERED_FAMILIES:
            del _remembered[next(iter(_remembered))]


def remembered_family(cond) -> dict | None:
    """The family the conditioning monitor identified for this very tensor, or None."""
    with _remembered_lock:
        entry = _remembered.get(id(cond))
    if entry is None or entry[0]() is not cond:  # a freed tensor's id can be reused
        return None
    return dict(entry[1])
