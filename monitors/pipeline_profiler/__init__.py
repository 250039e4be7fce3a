"""Profiling any Python pipeline: the decorator API (`api.py`), sessions, configuration, phases,
suggestions, usage statistics and the profiling report. `from monitors import pipeline_profiler as pm` is the entry.
The stage decorators take this pack's extractors `(args, kwargs, result)` and Inferix's `(args, kwargs)`.
"""

from .api import *  # noqa: F403 - the public API is api.py's __all__
from .api import __all__ as _api_names

# Inferix's decorator under Inferix's name, so that code written for it runs with this module as
# its only import; the pack's own instant event is `record_event`.
from .inferix import add_profiling_event

__all__ = [*_api_names, "add_profiling_event"]
