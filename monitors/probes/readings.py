"""Plain reading records produced by the probes. Unknown is None."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class GpuReading:
    index: int
    name: str | None = None
    allocated_bytes: int | None = None
    reserved_bytes: int | None = None
    peak_allocated_bytes: int | None = None
    peak_reserved_bytes: int | None = None
    nvml_used_bytes: int | None = None
    nvml_total_bytes: int | None = None
    # This process's device memory beyond torch's counters: as the driver counts it (NVML, per
    # process: every allocation, cuMem and the CUDA context included), and comfy-aimdo's own figure
    # (dynamic VRAM's vbars and cast buffers). Read by light snapshots too (Probes.process_device_memory).
    process_used_bytes: int | None = None
    aimdo_used_bytes: int | None = None
    utilization_pct: float | None = None
    temperature_c: float | None = None
    power_w: float | None = None

    @property
    def device(self) -> str:
        return f"cuda:{self.index}"


# The metrics a snapshot exposes by name; shared by spans, the sampler, reports and the panel.
HOST_METRICS = ("process_rss_bytes", "ram_used_bytes", "ram_available_bytes", "ram_used_pct", "cpu_pct")
# For these the low point is what matters (how close the system came to running out), so spans
# keep their minimum under `lows` instead of a maximum under `peaks`.
LOW_POINT_METRICS = frozenset({"ram_available_bytes"})
GPU_METRICS = (
    "allocated_bytes",
    "reserved_bytes",
    "nvml_used_bytes",
    "process_used_bytes",
    "aimdo_used_bytes",
    "utilization_pct",
    "temperature_c",
    "power_w",
)


@dataclass(frozen=True)
class Snapshot:
    monotonic_s: float
    unix_time_s: float
    process_rss_bytes: int | None = None
    ram_used_bytes: int | None = None
    ram_available_bytes: int | None = None
    ram_total_bytes: int | None = None
    ram_used_pct: float | None = None
    cpu_pct: float | None = None
    gpus: tuple[GpuReading, ...] = field(default_factory=tuple)

    def metrics(self) -> dict[str, float | int | None]:
        """Flat metric name -> value, e.g. `process_rss_bytes`, `cuda:0.allocated_bytes`."""
        values: dict[str, float | int | None] = {name: getattr(self, name) for name in HOST_METRICS}
        for gpu in self.gpus:
            for name in GPU_METRICS:
                values[f"{gpu.device}.{name}"] = getattr(gpu, name)
        return values

    def to_dict(self) -> dict:
        """Plain data of the moment: torch's peak counters are left out (see NOT_OF_THE_MOMENT)."""
        data = {name: getattr(self, name) for name in HOST_METRICS}
        data["ram_total_bytes"] = self.ram_total_bytes
        data["unix_time_s"] = self.unix_time_s
        data["gpus"] = [
            {k: v for k, v in gpu.__dict__.items() if k not in NOT_OF_THE_MOMENT} | {"device": gpu.device}
            for gpu in self.gpus
        ]
        return data


# A reading's torch peak counters hold the allocator's high point since its last reset, which each
# node's span makes: no figure of a snapshot's moment (nor the peak of the span that read it), so a
# written snapshot (a span's baseline and end, a live sample) leaves them out. Spans report their
# own peaks under `peaks`.
NOT_OF_THE_MOMENT = frozenset({"peak_allocated_bytes", "peak_reserved_bytes"})
