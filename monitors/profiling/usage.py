"""Usage statistics across a process: model initialisation, generations, memory, GPU utilisation.

The profiling API feeds the process-wide tracker: `profile_model_parameters` adds model
initialisation time, every `profile_session` adds one generation (its time, peak memory, and the
GPU utilisation read at its start and its end). `get_usage_statistics()` returns the figures as a
dict; `log_usage_summary()` writes them to the log.
"""

from __future__ import annotations

import logging
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

    def statistics(self) -> dict:
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
                "generations": [dict(g) for g in self._generations],
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
    ]
    for gen in stats["generations"][-20:]:
        lines.append(
            f"  #{gen['index']} {gen['name']} {gen['status']} {seconds(gen['duration_s'])}, GPU utilisation "
            f"before {_pct_list(gen['gpu_utilization_before_pct'])} after {_pct_list(gen['gpu_utilization_after_pct'])}"
        )
    return lines


tracker = UsageTracker()


def get_usage_statistics() -> dict:
    """Usage statistics of this process since start (or the last reset)."""
    return tracker.statistics()


def log_usage_summary(logger: logging.Logger | None = None, level: int = logging.INFO) -> dict:
    """Write the usage statistics to `logger` (this module's by default); returns them."""
    stats = tracker.statistics()
    for line in format_usage_summary(stats):
        (logger or log).log(level, "%s", line)
    return stats


def reset_usage_statistics() -> None:
    tracker.reset()
