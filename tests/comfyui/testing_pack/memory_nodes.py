"""Test-only node for the dynamic-VRAM checks: what ComfyUI's own patcher says is loaded.

PMTestLoadedSize  passes a MODEL through and returns in its ui the patcher's `loaded_size()` (on a
                  dynamic-VRAM patcher: the virtual allocation's resident part plus force-loaded
                  weights), `model.model_loaded_weight_memory` (the estimate-based count) and
                  `is_dynamic()`, read when it runs. Its optional `after` input (any LATENT) orders it
                  after a sampler, so the model it reads is loaded; a PipelineMonitorModels node fed
                  from its output then describes the model with nothing run in between.
"""


class PMTestLoadedSize:
    CATEGORY = "pipeline_monitor/testing"
    RETURN_TYPES = ("MODEL",)
    FUNCTION = "run"
    OUTPUT_NODE = True

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"model": ("MODEL",)}, "optional": {"after": ("LATENT",)}}

    def run(self, model, after=None):
        is_dynamic = getattr(model, "is_dynamic", None)
        ui = {
            "loaded_size": [int(model.loaded_size())],
            "model_loaded_weight_memory": [int(model.model.model_loaded_weight_memory)],
            "is_dynamic": [bool(is_dynamic()) if callable(is_dynamic) else False],
            "patcher_class": [type(model).__name__],
            "load_device": [str(model.load_device)],
        }
        return {"ui": ui, "result": (model,)}
