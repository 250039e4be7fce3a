"""The registry of step kinds: kind -> its summary declaration (`monitors/<kind>/summary.py`), in
the order of monitors.report.STEP_KINDS, kind -> its details declaration (`monitors/<kind>/details.py`)
(every kind declares them), and the lookups by kind that everything derived reads."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .. import report as run_report
from ..detail_fields import DetailGroup
from ..summary_fields import StepKindVocabulary, SummaryField
from .formatting import format_value, label_from_key

_REGISTRY: dict[str, StepKindVocabulary] | None = None


def registry() -> dict[str, StepKindVocabulary]:
    """kind -> its declaration, in the order of monitors.report.STEP_KINDS."""
    global _REGISTRY
    if _REGISTRY is None:
        # Imported on first use: the node text and the exporters import this module, and only a
        # lookup needs every stage's declaration (and the stage packages they load).
        from ..conditioning.summary import CONDITIONING
        from ..deep_profile.summary import DEEP_PROFILE
        from ..dumps.summary import TENSOR_COMPARE, TENSOR_DUMP
        from ..latent.summary import LATENT
        from ..lora.summary import LORA
        from ..models.summary import MODELS
        from ..profiling_step.summary import PROFILING
        from ..vae.summary import VAE_ENCODE

        kinds = (
            MODELS, LORA, CONDITIONING, VAE_ENCODE, LATENT, TENSOR_DUMP, TENSOR_COMPARE, PROFILING, DEEP_PROFILE
        )
        by_kind = {k.kind: k for k in kinds}
        if tuple(by_kind) != tuple(run_report.STEP_KINDS):
            raise RuntimeError(f"vocabulary kinds {tuple(by_kind)} differ from STEP_KINDS {run_report.STEP_KINDS}")
        _REGISTRY = by_kind
    return _REGISTRY


def vocabulary(kind: str) -> StepKindVocabulary | None:
    return registry().get(kind)


def summary_field(kind: str, name: str) -> SummaryField | None:
    vocab = vocabulary(kind)
    return None if vocab is None else vocab.field(name)


def names(kind: str) -> tuple[str, ...]:
    return registry()[kind].names


def key(kind: str, name: str) -> str:
    """A declared summary key, for code that reads one figure (exporters): a name the kind does not
    declare fails at import instead of reading None forever."""
    if summary_field(kind, name) is None:
        raise KeyError(f"{kind!r} declares no summary key {name!r}")
    return name


def details_registry() -> dict[str, DetailGroup]:
    """kind -> the declaration of its `details` (monitors/<kind>/details.py), for the kinds that
    declare them; the schema's `details_<kind>`, the panel's card labels and the metrics reference's
    detail rows come from it."""
    from ..conditioning.details import CONDITIONING_DETAILS
    from ..deep_profile.details import DEEP_PROFILE_DETAILS
    from ..dumps.details import TENSOR_COMPARE_DETAILS, TENSOR_DUMP_DETAILS
    from ..latent.details import LATENT_DETAILS
    from ..lora.details import LORA_DETAILS
    from ..models.details import MODELS_DETAILS
    from ..profiling_step.details import PROFILING_DETAILS
    from ..vae.details import VAE_ENCODE_DETAILS

    return {
        "models": MODELS_DETAILS,
        "lora": LORA_DETAILS,
        "conditioning": CONDITIONING_DETAILS,
        "vae_encode": VAE_ENCODE_DETAILS,
        "latent": LATENT_DETAILS,
        "tensor_dump": TENSOR_DUMP_DETAILS,
        "tensor_compare": TENSOR_COMPARE_DETAILS,
        "profiling": PROFILING_DETAILS,
        "deep_profile": DEEP_PROFILE_DETAILS,
    }


def detail_key(kind: str, path: str) -> str:
    """A declared detail key at a dotted path ("loaders.file.size_bytes"), for code that reads one:
    a path the kind does not declare fails at import instead of reading None forever."""
    group = details_registry().get(kind)
    if group is None or group.key(path) is None:
        raise KeyError(f"{kind!r} declares no detail {path!r}")
    return path.rpartition(".")[2]



def label(kind: str | None, name: str) -> str:
    declared = summary_field(kind, name) if kind else None
    return declared.label if declared else label_from_key(name)


def format_summary_value(kind: str | None, name: str, value: Any) -> str:
    declared = summary_field(kind, name) if kind else None
    return format_value(declared or name, value)


def ordered_keys(kind: str, summary: Mapping[str, Any]) -> list[str]:
    """Declared keys in declaration order, then any others in report order."""
    vocab = vocabulary(kind)
    declared = [n for n in vocab.names if n in summary] if vocab else []
    return declared + [k for k in summary if k not in declared]
