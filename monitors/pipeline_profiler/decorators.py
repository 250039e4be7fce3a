"""Inferix's import path: `from inferix.profiling.decorators import ...` becomes
`from monitors.pipeline_profiler.decorators import ...`. The names are inferix.py's."""

from .inferix import *  # noqa: F403 - inferix.py's __all__
from .inferix import __all__  # noqa: F401
