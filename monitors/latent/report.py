"""The `latent` step: the latent described, with the node that made it and what that cost."""

from __future__ import annotations

import time
from collections.abc import Mapping

from ..report import StepReport
from .analysis import analyse_latent

STEP_KIND = "latent"


def build_latent_step(
    node_id: str | None, latent, prompt: Mapping | None = None, recorder=None
) -> StepReport:
    summary, details, findings = analyse_latent(latent)
    # Which node made the latent (EmptyLatentImage, a sampler, a VAE encode) and what it cost.
    source = (
        None if recorder is None else recorder.upstream_profiles(node_id, prompt, ("latent",)).get("latent")
    )
    if source is not None:
        details["source"] = source
        summary["source_class"] = source.get("class_type")
    return StepReport(
        kind=STEP_KIND,
        node_id=node_id,
        summary=summary,
        details=details,
        findings=tuple(findings),
        created_unix_s=time.time(),
    )
