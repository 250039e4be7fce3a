"""Usage statistics across a process: model initialisation, generations, memory, GPU utilisation.

The profiling API feeds the process-wide tracker: `profile_model_parameters` adds model
initialisation time, every `profile_session` adds one generation (its time, peak memory, and the
GPU utilisation read at its start and its end). `get_usage_statistics()` returns the figures as a
dict; `log_usage_summary()` writes them to the log.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import deque

from ..report import format_bytes

log = logging.getLogger(__name__)

MAX_KEPT_GENERATIONS = 1000  # per-generation rows kept; the totals stay exact beyond it
MAX_KEPT_MODELS = 100


def _max(a, b):
    return b if a is None else a if b is None else max(a, b)


class UsageTracker:
    def __init__(self):
        self._lock = threading.Lock()
        self.reset()

    def reset(self) -> None:
        with self._lock:
            self._started_unix_s = time.time()
            self._models: deque[dict] = deque(maxlen=MAX_KEPT_MODELS)
            self._model_init_s = 0.0
            self._n_models = 0
            self._generations: deque[dict] = deque(maxlen=MAX_KEPT_GENERATIONS)
            self._n_generations = 0
            self._n_failed = 0
            self._total_s = 0.0
            self._peak_rss_bytes = None
            self._peak_gpu_allocated_bytes = None
            self._device_name: str | None = None

    def record_model_init(self, name: str, duration_s: float, parameters: dict | None = None) -> None:
        with self._lock:
            self._n_models += 1
            self._model_init_s += duration_s
            self._models.append({"name": name, "init_s": duration_s, **(parameters or {})})

    def models(self) -> list[dict]:
        with self._lock:
            return [dict(m) for m in self._models]

    def record_generation(
        self,
        name: str,
        run_id: str,
        duration_s: float,
        status: str,
        peak_rss_bytes: int | None,
        peak_gpu_allocated_bytes: int | None,
        gpu_utilization_before_pct: list | None,
        gpu_utilization_after_pct: list | None,
        device_name: str | None,
    ) -> None:
        with self._lock:
            self._n_generations += 1
            self._n_failed += int(status != "success")
            self._total_s += duration_s
            self._peak_rss_bytes = _max(self._peak_rss_bytes, peak_rss_bytes)
            self._peak_gpu_allocated_bytes = _max(self._peak_gpu_allocated_bytes, peak_gpu_allocated_bytes)
            self._device_name = device_name or self._device_name
            self._generations.append(
                {
                    "index": self._n_generations,
                    "name": name,
                    "run_id": run_id,
                    "status": status,
                    "duration_s": duration_s,
                    "peak_rss_bytes": peak_rss_bytes,
                    "peak_gpu_allocated_bytes": peak_gpu_allocated_bytes,
                    "gpu_utilization_before_pct": gpu_utilization_before_pct,
                    "gpu_utilization_after_pct": gpu_utilization_after_pct,
                }
            )

    def statistics(self, probes=None) -> dict:
        """The totals, the kept rows, and the memory in use now (`probes`: the readings backend,
        the process-wide one by default)."""
        current = current_memory(probes)
        with self._lock:
            n = self._n_generations
            durations = [g["duration_s"] for g in self._generations]
            return {
                "since_unix_s": self._started_unix_s,
                "device_name": self._device_name,
                "n_models_initialised": self._n_models,
                "model_init_s": self._model_init_s if self._n_models else None,
                "models": [dict(m) for m in self._models],
                "n_generations": n,
                "n_failed_generations": self._n_failed,
                "total_generation_s": self._total_s if n else None,
                "mean_generation_s": self._total_s / n if n else None,
                "min_generation_s": min(durations) if durations else None,
                "max_generation_s": max(durations) if durations else None,
                "peak_rss_bytes": self._peak_rss_bytes,
                "peak_gpu_allocated_bytes": self._peak_gpu_allocated_bytes,
                **current,
                "generations": [dict(g) for g in self._generations],
            }


def current_memory(probes=None) -> dict:
    """Process RSS and each GPU's torch allocated/reserved memory now; the GPU sums are None with a
    reason where torch sees no GPU (unknown, not 0)."""
    if probes is None:
        from ..probes import get_probes

        probes = get_probes()
    devices = []
    for index in range(probes.torch_device_count()):
        memory = probes.torch_memory(index) or {}
        devices.append(
            {
                "device": f"cuda:{index}",
                "allocated_bytes": memory.get("allocated_bytes"),
                "reserved_bytes": memory.get("reserved_bytes"),
            }
        )

    def total(key):
        values = [d[key] for d in devices]
        return None if not values or None in values else sum(values)

    return {
        "current_process_rss_bytes": probes.process_rss_bytes(),
        "current_gpu_allocated_bytes": total("allocated_bytes"),
        "current_gpu_reserved_bytes": total("reserved_bytes"),
        "current_gpu_memory": devices,
        "current_gpu_unknown_reason": None if devices else "no GPU seen by torch",
    }


def _pct_list(values) -> str:
    if not values:
        return "n/a"
    return ", ".join("n/a" if v is None else f"{v:.0f} %" for v in values)


def format_usage_summary(stats: dict) -> list[str]:
    """The statistics as log lines (no emoji, one fact per line)."""

    def seconds(value):
        return "n/a" if value is None else f"{value:.3f} s"

    lines = [
        f"Pipeline Monitor usage on {stats.get('device_name') or 'unknown device'}:",
        f"  models initialised: {stats['n_models_initialised']} in {seconds(stats['model_init_s'])}",
        f"  generations: {stats['n_generations']} ({stats['n_failed_generations']} failed), total "
        f"{seconds(stats['total_generation_s'])}, mean {seconds(stats['mean_generation_s'])}",
        f"  peak RSS {format_bytes(stats['peak_rss_bytes'])}, peak GPU allocated "
        f"{format_bytes(stats['peak_gpu_allocated_bytes'])}",
        f"  now: RSS {format_bytes(stats.get('current_process_rss_bytes'))}, GPU allocated "
        f"{format_bytes(stats.get('current_gpu_allocated_bytes'))}, reserved "
        f"{format_bytes(stats.get('current_gpu_reserved_bytes'))}",
    ]
    for gen in stats["generations"][-20:]:
        lines.append(
            f"  #{gen['index']} {gen['name']} {gen['status']} {seconds(gen['duration_s'])}, GPU utilisation "
            f"before {_pct_list(gen['gpu_utilization_before_pct'])} after {_pct_list(gen['gpu_utilization_after_pct'])}"
        )
    return lines


tracker = UsageTracker()


def get_usage_statistics(probes=None) -> dict:
    """Usage statistics of this process since start (or the last reset), with the memory in use now."""
    return tracker.statistics(probes)


LOG_FILE_FORMAT = "%(asctime)s - %(levelname)s - %(message)s"


def log_usage_summary(
    logger: logging.Logger | None = None,
    level: int = logging.INFO,
    log_file: str | os.PathLike | None = None,
    probes=None,
) -> dict:
    """Write the usage statistics to `logger` (this module's by default) and, with `log_file`, also
    append them to that file beside the console log (timestamped lines); returns them."""
    stats = tracker.statistics(probes)
    target = logger or log
    handler = None
    if log_file is not None:
        handler = logging.FileHandler(os.fspath(log_file), mode="a", encoding="utf-8")
        handler.setFormatter(logging.Formatter(LOG_FILE_FORMAT))
        handler.setLevel(level)
        target.addHandler(handler)
    # The logger's own level must not keep the summary out of a file that was asked for.
    previous_level = target.level
    if handler is not None and not target.isEnabledFor(level):
        target.setLevel(level)
    try:
        for line in format_usage_summary(stats):
            target.log(level, "%s", line)
    finally:
        if handler is not None:
            target.setLevel(previous_level)
            target.removeHandler(handler)
            handler.close()
    return stats


def export_usage_statistics(path: str | os.PathLike, fmt: str | None = None, probes=None) -> list[str]:
    """Write the usage statistics to `path` as JSON, or as CSV (`fmt` "csv", or a .csv path): the
    generations at `path` and the totals as name,value rows beside it (`<stem>.totals.csv`).
    Returns the files written."""
    from ..exporters.csv_tables import usage_generations_csv, usage_totals_csv, write_text
    from ..report import write_json_atomic

    path = os.fspath(path)
    fmt = fmt or ("csv" if path.lower().endswith(".csv") else "json")
    stats = tracker.statistics(probes)
    if fmt == "json":
        write_json_atomic(path, stats)
        return [path]
    if fmt != "csv":
        raise ValueError(f"format {fmt!r}: json or csv")
    totals = (path[:-4] if path.lower().endswith(".csv") else path) + ".totals.csv"
    write_text(path, usage_generations_csv(stats))
    write_text(totals, usage_totals_csv(stats))
    return [path, totals]


def reset_usage_statistics() -> None:
    tracker.reset()
