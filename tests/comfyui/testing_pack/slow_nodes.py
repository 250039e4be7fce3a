"""PMTestSlow: passes an IMAGE through after `seconds`, sleeping in small steps and honouring
ComfyUI's interrupt between them (like a sampler checks it between steps)."""

import time


class PMTestSlow:
    CATEGORY = "pipeline_monitor/testing"
    RETURN_TYPES = ("IMAGE",)
    FUNCTION = "run"

    @classmethod
    def INPUT_TYPES(cls):
        return {
            "required": {
                "image": ("IMAGE",),
                "seconds": ("FLOAT", {"default": 5.0, "min": 0.0, "max": 600.0}),
                "seed": ("INT", {"default": 0, "min": 0, "max": 2**31 - 1}),
            }
        }

    def run(self, image, seconds, seed):
        import comfy.model_management

        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            comfy.model_management.throw_exception_if_processing_interrupted()
            time.sleep(0.02)
        return (image,)
