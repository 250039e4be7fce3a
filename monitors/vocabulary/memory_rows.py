"""The memory picture of a step (monitors.engine.span.memory_picture) and a node row's GPU
figures, as people read them: one declaration for the panel (generated into
web/lib/vocabulary.generated.mjs) and the HTML report."""

from __future__ import annotations

from typing import Any

from ..node_fields import GPU_BUSY_CAVEAT, GPU_PEAK, GPU_TIME_CAVEAT

# The rows a step's "Memory" table shows, in order: where each figure sits in `details.memory`
# (`group` None: at the top; "system_ram": under it; "gpu": in each entry of `gpus`, one row per
# device), its label, and the reason key of `unknown_reasons` that explains it when unread. One
# declaration for the panel (generated into web/lib/vocabulary.generated.mjs) and the HTML report.
MEMORY_ROWS: tuple[dict[str, Any], ...] = (
    {"group": None, "field": "process_rss_bytes", "label": "process RSS", "reason": None,
     "description": "resident memory of this process"},
    {"group": "system_ram", "field": "used_bytes", "label": "RAM used", "reason": "system_ram",
     "description": "system RAM in use (all processes)"},
    {"group": "system_ram", "field": "available_bytes", "label": "RAM available", "reason": "system_ram",
     "description": "system RAM available; its extreme is the low point, not a peak"},
    {"group": "gpu", "field": "allocated_bytes", "label": "allocated", "reason": None,
     "description": "torch allocator: memory held by tensors"},
    {"group": "gpu", "field": "reserved_bytes", "label": "reserved", "reason": None,
     "description": "torch allocator: memory reserved by its caching allocator"},
    {"group": "gpu", "field": "nvml_used_bytes", "label": "NVML used", "reason": "gpu_nvml",
     "description": "device memory in use as NVML reports it (all processes)"},
)
MEMORY_NOT_READ_REASON = "not read by this span"

# The GPU figures of a node row: short label (a column) and what each measures (its title).
NODE_GPU_FIGURES = {
    "gpu_time_s": {"label": "GPU span", "description": GPU_TIME_CAVEAT},
    "gpu_busy_s": {"label": "GPU busy", "description": GPU_BUSY_CAVEAT},
    # short column labels for the sidebar; what each measures from the GPU peaks' declaration
    "peak_process_used_bytes": {
        "label": "Device",
        "description": GPU_PEAK.key("peak_process_used_bytes").description,
    },
    "peak_aimdo_used_bytes": {
        "label": "Dyn VRAM",
        "description": GPU_PEAK.key("peak_aimdo_used_bytes").description,
    },
}
