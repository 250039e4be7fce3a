"""GPU busy time of a node from NVML's utilization samples, beside its CUDA stream span.

The CUDA events of a node (`gpu_time_s`, the "GPU stream span") measure how far the GPU's queue on
the current stream moved between the node's start and end: idle time included, so a node that only
synchronises (a save, a loader) gets its whole wall time. NVML samples the device instead: every
sampling period (1/6 s to 1 s depending on the product) it records the percentage of that period
during which a kernel ran. A node's busy time is the sum, over the sampling periods that overlap
its window, of that percentage times the overlap. An idle node cannot inflate it; work of other
processes on the same GPU can, and a period that the node shares with its neighbours is split in
proportion to time (so the figure is good to about one sampling period at each end). A node shorter
than the sampling period gets no figure, with that reason.

The driver keeps only a short ring of samples: the recorder collects them as nodes finish
(`SampleLog.collect`, one NVML call) and computes every node's figure at the prompt's end.
"""

from __future__ import annotations

import dataclasses
import time
from statistics import median

MAX_KEPT_SAMPLES = 20_000  # per device and prompt: hours at NVML's fastest rate
COLLECT_EVERY_S = 5.0  # NVML's ring holds far longer; a prompt of quick nodes costs few calls
LOOKBACK_S = 2.0  # samples this long before the prompt: the period covering its first node's start
NOT_YET_REASON = "read at the prompt's end (the CUDA events and NVML's samples after the node)"


class SampleLog:
    """The utilization samples of one prompt, per device, newest last, without repeats."""

    def __init__(self, since_unix_s: float):
        self.since_unix_s = since_unix_s
        self.samples: dict[int, list[tuple[float, float]]] = {}
        self.unknown_reason: dict[int, str] = {}
        self._collected_s: dict[int, float] = {}  # device -> time.monotonic() of its last fetch

    def collect(self, probes, index: int, force: bool = False) -> None:
        """Fetch the samples NVML has newer than the last kept one: at most once every
        COLLECT_EVERY_S as nodes finish (one NVML call), always when `force`d at the prompt's end."""
        now = time.monotonic()
        last = self._collected_s.get(index)
        if not force and last is not None and now - last < COLLECT_EVERY_S:
            return
        self._collected_s[index] = now
        kept = self.samples.setdefault(index, [])
        since = kept[-1][0] if kept else self.since_unix_s
        new = probes.gpu_utilization_samples(index, since)
        if new is None:
            self.unknown_reason.setdefault(index, "NVML gave no utilization samples for this device")
            return
        kept.extend(s for s in new if s[0] > since)
        del kept[:-MAX_KEPT_SAMPLES]

    def busy_s(self, index: int, start_unix_s: float, end_unix_s: float) -> tuple[float | None, str | None]:
        if index in self.unknown_reason and not self.samples.get(index):
            return None, self.unknown_reason[index]
        return busy_time(self.samples.get(index) or [], start_unix_s, end_unix_s)


def sampling_period_s(samples) -> float | None:
    gaps = [b[0] - a[0] for a, b in zip(samples, samples[1:], strict=False) if b[0] > a[0]]
    return median(gaps) if gaps else None


def busy_time(samples, start_unix_s: float, end_unix_s: float) -> tuple[float | None, str | None]:
    """(busy seconds within [start, end], None) or (None, why): `samples` are NVML's (unix s, pct)
    pairs, oldest first; each one covers the period since the sample before it."""
    period = sampling_period_s(samples)
    if period is None:
        return None, "NVML gave fewer than two utilization samples"
    duration = end_unix_s - start_unix_s
    if duration < period:
        return None, f"the node ({duration:.3f} s) is shorter than NVML's sampling period ({period:.3f} s)"
    if samples[0][0] > start_unix_s:
        return None, "NVML's samples no longer reach back to the node's start"
    if samples[-1][0] < end_unix_s:
        return None, "NVML had no sample after the node's end when it was read"
    busy = 0.0
    for (previous, _), (stamp, pct) in zip(samples, samples[1:], strict=False):
        overlap = min(stamp, end_unix_s) - max(previous, start_unix_s)
        if overlap > 0:
            busy += pct / 100.0 * overlap
    return busy, None


def resolve_busy(nodes: list, pending, log: SampleLog | None, probes, run_started_unix_s: float) -> None:
    """At the prompt's end: each timed node row (index, start mark, end mark) gets its busy time
    on the device of its CUDA marks, or the reason it has none."""
    if log is None:
        return
    devices = {(end or start)[0] for _index, start, end in pending}
    for device in devices:
        log.collect(probes, device, force=True)
    for index, start, end in pending:
        row = nodes[index]
        if row.start_offset_s is None or row.duration_s is None:
            busy, reason = None, "the node's window is unknown"
        else:
            node_start = run_started_unix_s + row.start_offset_s
            busy, reason = log.busy_s((end or start)[0], node_start, node_start + row.duration_s)
        nodes[index] = dataclasses.replace(row, gpu_busy_s=busy, gpu_busy_unknown_reason=reason)
