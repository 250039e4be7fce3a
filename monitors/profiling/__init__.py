"""Profiling any Python pipeline: the decorator API (`api.py`), sessions, configuration, phases,
suggestions, usage statistics and the profiling report. `from monitors import profiling as pm` is the entry.
"""

from .api import *  # noqa: F403 - the public API is api.py's __all__
from .api import __all__  # noqa: F401
