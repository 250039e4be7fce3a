"""Deep profile on demand: torch.profiler over one prompt, per node (control.py: asking for it and
the ComfyUI adapter's calls; session.py: the profiler and the step; analysis.py: per-node figures;
trace_ops.py: the ops and kernels for the trace; summary.py: the declared fields)."""

from ..stage import Stage
from .control import ENV_VAR, DeepProfileController, DeepProfileSwitch, get_controller
from .details import DEEP_PROFILE_DETAILS
from .session import KIND, DeepProfiler, build_step
from .summary import DEEP_PROFILE

# made by the profile hook when a deep profile was asked for (the route or the variable), no node
STAGE = Stage(kind=KIND, summary=DEEP_PROFILE, details=DEEP_PROFILE_DETAILS)

__all__ = [
    "ENV_VAR",
    "KIND",
    "STAGE",
    "DeepProfileController",
    "DeepProfileSwitch",
    "DeepProfiler",
    "build_step",
    "get_controller",
]
