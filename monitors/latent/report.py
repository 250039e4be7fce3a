"""The `latent` step: the latent described, with the node that made it and what that cost."""

from __future__ import annotations

import time
from collections.abc import Mapping

from ..report import StepReport
from ..summary_fields import NOT_GIVEN
from .analysis import analyse_latent
from .details import LATENT_DETAILS

STEP_KIND = "latent"


def build_latent_step(
    node_id: str | None, latent, prompt: Mapping | None = None, recorder=None
) -> StepReport:
    # Which node made the latent (EmptyLatentImage, a sampler, a VAE encode) and what it cost.
    source = (
        None if recorder is None else recorder.upstream_profiles(node_id, prompt, ("latent",)).get("latent")
    )
    made_by = NOT_GIVEN if source is None else source.get("class_type")
    summary, details, findings = analyse_latent(latent, made_by)
    if source is not None:
        details["source"] = source
    return StepReport(
        kind=STEP_KIND,
        node_id=node_id,
        summary=summary,
        details=LATENT_DETAILS.build(**details),
        findings=tuple(findings),
        created_unix_s=time.time(),
    )
