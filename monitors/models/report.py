"""The `models` step: each connected MODEL / CLIP / VAE described, its loader's cost, the memory baseline."""

from __future__ import annotations

import time
from collections.abc import Mapping

from ..engine.upstream_memory import step_memory
from ..probes import get_probes
from ..report import Finding, StepReport, sum_known
from .details import MODELS_DETAILS
from .state import describe
from .summary import ModelsSide, ModelsSummary

STEP_KIND = "models"
INPUT_KINDS = ("model", "clip", "vae")


def build_models_step(
    node_id: str | None, inputs: Mapping, prompt: Mapping | None = None, recorder=None
) -> StepReport:
    """`inputs`: kind -> object or None; `recorder` (a RunRecorder) gives the loaders' profile rows."""
    objects, findings, errors = {}, [], []
    for kind in INPUT_KINDS:
        obj = inputs.get(kind)
        if obj is None:
            continue
        try:
            objects[kind] = describe(kind, obj)
        except Exception as exc:
            errors.append(f"{kind}: {type(exc).__name__}: {exc}")
            continue
        if not objects[kind].get("n_elements"):  # every real MODEL / CLIP / VAE holds weights
            findings.append(
                Finding(
                    "warning",
                    f"The {kind} input is a {type(obj).__name__} without weights, not a {kind.upper()}.",
                    "no_weights",
                )
            )
    if not objects:
        findings.append(
            Finding(
                "info",
                "Nothing connected: connect a MODEL, CLIP or VAE to see its state.",
                "nothing_connected",
            )
        )
    loaders = {} if recorder is None else recorder.upstream_profiles(node_id, prompt, INPUT_KINDS)
    baseline = get_probes().snapshot().to_dict()
    sides = {
        kind: ModelsSide(class_=info.get("module_class") or info.get("class"), size_bytes=info.get("size_bytes"))
        for kind, info in objects.items()
    }
    summary = ModelsSummary(
        n_objects=len(objects),
        total_size_bytes=sum_known(o.get("size_bytes") for o in objects.values()),
        loaders_duration_s=sum_known(p.get("duration_s") for p in loaders.values()),
        process_rss_bytes=baseline.get("process_rss_bytes"),
        model_config_class=objects.get("model", {}).get("config_class"),
        **sides,  # the objects connected: model, clip, vae
    )
    return StepReport(
        kind=STEP_KIND,
        node_id=node_id,
        summary=summary.to_dict(),
        details=MODELS_DETAILS.build(
            objects=objects,
            loaders=loaders,
            memory_baseline=baseline,
            # the picture over the loaders' own spans (monitors/engine/upstream_memory.py)
            **step_memory(recorder, node_id),
        ),
        findings=tuple(findings),
        monitor_errors=tuple(errors),
        created_unix_s=time.time(),
    )
