"""Test-only ComfyUI node pack, loaded next to Pipeline Monitor by the integration tests' server.

PMTestObjectId  output node: returns the Python id() of each MODEL/CLIP/VAE it receives in its
                ui, so a test can check that two nodes received the very same objects.
PMTestRaise     output node that raises at run time (a runtime error, not a validation error).
PMTestLoadedSize  (memory_nodes.py) the patcher's loaded_size() as ComfyUI counts it, in its ui.
PMTestFreeMemory  (memory_nodes.py) asks ComfyUI's model manager to free all memory: a tight budget.
"""


class PMTestObjectId:
    CATEGORY = "pipeline_monitor/testing"
    RETURN_TYPES = ()
    FUNCTION = "run"
    OUTPUT_NODE = True

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {}, "optional": {"model": ("MODEL",), "clip": ("CLIP",), "vae": ("VAE",)}}

    def run(self, model=None, clip=None, vae=None):
        received = {"model": model, "clip": clip, "vae": vae}
        # ui values must be lists: ComfyUI concatenates them across list executions.
        return {"ui": {kind: [str(id(obj))] for kind, obj in received.items() if obj is not None}}


class PMTestRaise:
    CATEGORY = "pipeline_monitor/testing"
    RETURN_TYPES = ()
    FUNCTION = "run"
    OUTPUT_NODE = True

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"image": ("IMAGE",), "message": ("STRING", {"default": "pm test failure"})}}

    def run(self, image, message):
        raise RuntimeError(message)


NODE_CLASS_MAPPINGS = {"PMTestObjectId": PMTestObjectId, "PMTestRaise": PMTestRaise}

from .conditioning_nodes import PMTestConditioning, PMTestConditioningId, PMTestTinyClip  # noqa: E402

NODE_CLASS_MAPPINGS.update(
    PMTestConditioning=PMTestConditioning,
    PMTestConditioningId=PMTestConditioningId,
    PMTestTinyClip=PMTestTinyClip,
)

from .lora_nodes import PMTestLatentDigest  # noqa: E402

NODE_CLASS_MAPPINGS["PMTestLatentDigest"] = PMTestLatentDigest

from .vae_nodes import PMTestNoiseImage  # noqa: E402

NODE_CLASS_MAPPINGS["PMTestNoiseImage"] = PMTestNoiseImage

from .slow_nodes import PMTestSlow  # noqa: E402

NODE_CLASS_MAPPINGS["PMTestSlow"] = PMTestSlow

from .memory_nodes import PMTestFreeMemory, PMTestLoadedSize  # noqa: E402

NODE_CLASS_MAPPINGS["PMTestLoadedSize"] = PMTestLoadedSize
NODE_CLASS_MAPPINGS["PMTestFreeMemory"] = PMTestFreeMemory
