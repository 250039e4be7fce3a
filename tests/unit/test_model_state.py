import uuid

import pytest

torch = pytest.importorskip("torch")

from monitors.models.report import build_models_step  # noqa: E402
from monitors.models.state import describe, describe_model, module_memory  # noqa: E402


class PatcherLike:
    """The attributes of a ComfyUI ModelPatcher that describe() reads (real ones are covered in tests/comfyui)."""

    def __init__(self, module, parent=None):
        self.model = module
        self.load_device = torch.device("cpu")
        self.offload_device = torch.device("cpu")
        self.patches = {"a.weight": [object()], "b.weight": [object()]}
        self.patches_uuid = uuid.uuid4()
        self.parent = parent
        module.model_loaded_weight_memory = 0
        module.current_weight_patches_uuid = None

    def model_dtype(self):
        return torch.float16


def test_module_memory_counts_parameters_and_buffers():
    module = torch.nn.Linear(10, 4)
    module.register_buffer("scale", torch.zeros(3, dtype=torch.float64))
    memory = module_memory(module)
    assert memory["size_bytes"] == (10 * 4 + 4) * 4 + 3 * 8
    assert memory["bytes_by_device"] == {"cpu": memory["size_bytes"]}
    assert memory["dtype"] == "float32"


def test_describe_patcher_like_model():
    module = torch.nn.Linear(8, 8)
    parent = PatcherLike(module)
    patcher = PatcherLike(module, parent=parent)
    info = describe_model(patcher)
    assert info["object_id"] == id(patcher) and info["class"] == "PatcherLike"
    assert info["module_class"] == "Linear" and info["dtype"] == "float16"
    assert info["n_patches"] == 2 and info["patches_uuid"] == str(patcher.patches_uuid)
    assert info["load_device"] == "cpu" and info["parent_object_id"] == id(parent)
    assert info["size_bytes"] == (64 + 8) * 4 and info["resident_bytes"] == info["size_bytes"]
    assert info["weights_patched"] is False


def test_detected_config_class_beside_the_model_base_class():
    class SD20:  # the name ComfyUI's supported_models class carries
        pass

    module = torch.nn.Linear(2, 2)
    module.model_config = SD20()
    summary_class = build_models_step("1", {"model": PatcherLike(module)}).summary
    info = describe_model(PatcherLike(module))
    assert info["config_class"] == "SD20" and "config_class" not in info["unknown_reasons"]
    assert summary_class["model_config_class"] == "SD20" and summary_class["model_class"] == "Linear"
    bare = describe_model(PatcherLike(torch.nn.Linear(2, 2)))
    assert bare["config_class"] is None and "no model_config" in bare["unknown_reasons"]["config_class"]
    assert build_models_step("1", {"vae": torch.nn.Linear(2, 2)}).summary["model_config_class"] is None


def test_describe_plain_objects_and_broken_ones():
    assert describe("model", torch.nn.Linear(2, 2))["size_bytes"] == 24

    class Broken:
        @property
        def cond_stage_model(self):
            raise RuntimeError("gone")

    with pytest.raises(RuntimeError):
        describe("clip", Broken())
    vae_like = type(
        "VAE",
        (),
        {
            "first_stage_model": torch.nn.Conv2d(3, 4, 1),
            "device": torch.device("cpu"),
            "vae_dtype": torch.float32,
            "latent_channels": 4,
            "latent_dim": 2,
            "downscale_ratio": 8,
        },
    )()
    info = describe("vae", vae_like)
    assert (
        info["latent_channels"] == 4 and info["downscale_ratio"] == 8 and info["size_bytes"] == (12 + 4) * 4
    )


def test_the_direct_walk_lists_what_parameters_and_buffers_list():
    """module_memory's walk of the submodules gives torch's own lists, in order: shared modules and
    shared tensors once, None entries skipped, a tensor both parameter and buffer in both."""
    from monitors.models.state import _parameters_and_buffers

    shared = torch.nn.Linear(3, 3)
    model = torch.nn.Sequential(
        torch.nn.Sequential(torch.nn.Linear(2, 2, bias=False), torch.nn.BatchNorm1d(2)),
        shared,
        torch.nn.Sequential(shared, torch.nn.Conv2d(1, 1, 1)),
    )
    model[2][1].weight = model[0][0].weight  # a parameter shared across modules
    model[2].register_buffer("also_a_param", model[1].bias)
    model[2].register_buffer("nothing", None)
    model[0].add_module("absent", None)
    expected = list(model.parameters()) + list(model.buffers())
    walked = _parameters_and_buffers(model)
    assert len(walked) == len(expected) and all(a is b for a, b in zip(walked, expected, strict=True))
    memory = module_memory(model)
    assert memory["n_elements"] == sum(t.numel() for t in expected)
