"""The pack's process-wide state (report store, run recorder, sampler), created on first use.

Nothing here runs at import: ComfyUI imports the pack at start-up, and the pack must cost
nothing until a prompt runs or the panel asks for data.
"""

from __future__ import annotations

import logging
import os

from ..monitors.engine.recorder import RunRecorder
from ..monitors.engine.sampler import Sampler
from ..monitors.engine.store import RunStore
from ..monitors.lazy import Lazy

log = logging.getLogger(__name__)

PACK_OUTPUT_FOLDER = "pipeline_monitor"
ENV_PROFILE = "PIPELINE_MONITOR_PROFILE"  # "0" switches the per-node profile off
ENV_MAX_RUNS = "PIPELINE_MONITOR_MAX_RUNS"
ENV_SAMPLE_INTERVAL_MS = "PIPELINE_MONITOR_SAMPLE_INTERVAL_MS"  # default 500 (2 Hz)


def pack_output_dir() -> str:
    import folder_paths  # ComfyUI's; imported late so nothing happens at pack import

    return os.path.join(folder_paths.get_output_directory(), PACK_OUTPUT_FOLDER)


def reports_dir() -> str:
    return os.path.join(pack_output_dir(), "reports")


def _env_int(name: str, default: int) -> int:
    try:
        return max(1, int(os.environ.get(name, default)))
    except ValueError:
        log.warning("pipeline monitor: %s must be an integer, using %d", name, default)
        return default


class Runtime:
    def __init__(self, store: RunStore, recorder: RunRecorder, sampler: Sampler):
        self.store = store
        self.recorder = recorder
        self.sampler = sampler


def _make_runtime() -> Runtime:
    store = RunStore(reports_dir(), max_runs=_env_int(ENV_MAX_RUNS, 50), background_writes=True)
    try:
        # History survives a restart: the panel lists the reports already on disk.
        store.load_from_disk()
    except Exception as exc:
        log.warning("pipeline monitor: earlier reports not loaded: %s: %s", type(exc).__name__, exc)
    recorder = RunRecorder(store, profile_enabled=os.environ.get(ENV_PROFILE, "1") != "0")
    sampler = Sampler(interval_s=_env_int(ENV_SAMPLE_INTERVAL_MS, 500) / 1000.0)
    return Runtime(store, recorder, sampler)


_runtime = Lazy(_make_runtime)
get_runtime = _runtime.get
set_runtime = _runtime.set  # tests
