"""Test-only nodes: what ComfyUI's own patcher says is loaded, and a tight memory budget.

PMTestLoadedSize  passes a MODEL through and returns in its ui the patcher's `loaded_size()` (on a
                  dynamic-VRAM patcher: the virtual allocation's resident part plus force-loaded
                  weights), `model.model_loaded_weight_memory` (the estimate-based count) and
                  `is_dynamic()`, read when it runs. Its optional `after` input (any LATENT) orders it
                  after a sampler, so the model it reads is loaded; a PipelineMonitorModels node fed
                  from its output then describes the model with nothing run in between. Its ui
                  also has `model_size()`.
PMTestFreeMemory  passes a LATENT through after asking ComfyUI's model manager to free all memory
                  on the torch device (`free_memory`): the stand-in for a tight budget on the CPU,
                  where ComfyUI never frees memory to load a model. `seed` makes it run again.
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
            "model_size": [int(model.model_size())],
        }
        return {"ui": ui, "result": (model,)}


class PMTestFreeMemory:
    CATEGORY = "pipeline_monitor/testing"
    RETURN_TYPES = ("LATENT",)
    FUNCTION = "run"

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"samples": ("LATENT",), "seed": ("INT", {"default": 0})}}

    def run(self, samples, seed):
        import comfy.model_management as mm

        mm.free_memory(1e30, mm.get_torch_device())
        return (samples,)
