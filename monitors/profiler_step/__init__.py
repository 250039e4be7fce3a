"""The `profiling` step: its summary declaration (summary.py) and its readers (phases.py), below
the vocabulary and the exporters that read it; the profiler that makes one is monitors/pipeline_profiler/."""

from ..stage import Stage
from .details import PROFILING_DETAILS
from .summary import PROFILING

# made by the profiler of any pipeline (monitors/pipeline_profiler/), no node
STAGE = Stage(kind="profiling", summary=PROFILING, details=PROFILING_DETAILS, spec="PROF")
