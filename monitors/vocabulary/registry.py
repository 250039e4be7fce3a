"""The registry of step kinds: kind -> its summary declaration (`monitors/<kind>/summary.py`), in
the order of the registered stages (stages.py: STAGES), kind -> its details declaration
(`monitors/<kind>/details.py`; every kind declares them), and the lookups by kind that everything derived
reads."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..detail_fields import DetailGroup
from ..summary_fields import StepKindVocabulary, SummaryField
from .formatting import format_value, label_from_key

_BY_KIND: tuple[tuple, dict[str, StepKindVocabulary], dict[str, DetailGroup]] | None = None


def _by_kind() -> tuple[dict[str, StepKindVocabulary], dict[str, DetailGroup]]:
    """The declarations by kind, made again when the registered stages change."""
    global _BY_KIND
    # Imported on first use: the node text and the exporters import this module, and only a
    # lookup needs every stage's declaration (and the stage packages they load).
    from . import stages

    if _BY_KIND is None or _BY_KIND[0] is not stages.STAGES:
        stages.step_kinds()  # a kind registered twice fails here
        summaries = {stage.kind: stage.summary for stage in stages.STAGES}
        details = {stage.kind: stage.details for stage in stages.STAGES if stage.details is not None}
        _BY_KIND = (stages.STAGES, summaries, details)
    return _BY_KIND[1], _BY_KIND[2]


def registry() -> dict[str, StepKindVocabulary]:
    """kind -> its summary declaration, in the order of the registered stages (stages.py: STAGES)."""
    return _by_kind()[0]


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
    return _by_kind()[1]


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
