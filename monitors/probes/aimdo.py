"""comfy-aimdo's own figure of the VRAM it holds (dynamic VRAM, ComfyUI 0.33+).

Dynamic VRAM's virtual allocations (vbars) and cast buffers are cuMem allocations outside torch's
allocator: torch's counters never see them. comfy-aimdo counts them per device
(`get_total_vram_usage` of a device context). The module is read only where ComfyUI has already
loaded and initialised it: it is never imported here (importing it loads a CUDA library).
Methods may raise; the Probes facade turns any failure into None.
"""

from __future__ import annotations

import sys

CONTROL_MODULE = "comfy_aimdo.control"


class AimdoBackend:
    name = "comfy_aimdo"

    def unavailable_reason(self) -> str | None:
        """Why this process has no comfy-aimdo figure; None when it has one."""
        control = sys.modules.get(CONTROL_MODULE)
        if control is None:
            return "comfy-aimdo is not loaded in this process (no dynamic VRAM)"
        lib = getattr(control, "lib", None)
        if lib is None:
            return "comfy-aimdo is loaded but not initialised (dynamic VRAM is off)"
        if not callable(getattr(control, "get_devctx", None)) or not hasattr(lib, "get_total_vram_usage"):
            version = getattr(sys.modules.get("comfy_aimdo._version"), "__version__", "of unknown version")
            return f"the installed comfy-aimdo ({version}) exposes no per-device VRAM usage"
        return None

    def used_bytes(self, index: int) -> int:
        """VRAM comfy-aimdo holds on CUDA device `index` (its vbars and cast buffers)."""
        control = sys.modules[CONTROL_MODULE]
        return int(control.lib.get_total_vram_usage(control.get_devctx(int(index))))
