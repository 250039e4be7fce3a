"""The described state of model objects, field by field, on small torch modules and stand-ins:
bytes per device and dtype, the device a module mostly sits on, the resident bytes on the load
device, a VAE's compression ratio as JSON numbers, object patch names, and the reasons of unknowns."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from monitors.models import state  # noqa: E402
from monitors.models.state import (  # noqa: E402
    _compression_ratio,
    _resident,
    describe,
    describe_clip,
    describe_model,
    describe_patcher,
    describe_vae,
    module_memory,
    object_patch_names,
    shared_module_memory,
)
from tests.unit.test_models_shared_memory import Counted  # noqa: E402


class Tensors:
    """A non-torch module: parameters() and buffers() only, each with its device, dtype and size."""

    def __init__(self, parameters, buffers=()):
        self._parameters, self._buffers = list(parameters), list(buffers)

    def parameters(self):
        return iter(self._parameters)

    def buffers(self):
        return iter(self._buffers)


class Meta:
    def __init__(self, device, dtype, nbytes, numel):
        self.device, self.dtype, self.nbytes = device, dtype, nbytes
        self._numel = numel

    def numel(self):
        return self._numel


def test_bytes_per_device_and_the_dtype_holding_the_most_bytes():
    module = Tensors(
        [Meta("cuda:0", torch.float16, 100, 50), Meta("cuda:0", torch.float32, 40, 10)],
        [Meta("cpu", torch.float32, 80, 20), Meta("cuda:0", torch.float16, 6, 3)],
    )
    assert module_memory(module) == {
        "size_bytes": 226,
        "bytes_by_device": {"cuda:0": 146, "cpu": 80},
        "dtype": "float32",  # 120 bytes against float16's 106
        "n_elements": 83,
    }


def test_a_module_without_tensors():
    assert module_memory(Tensors([])) == {
        "size_bytes": 0,
        "bytes_by_device": {},
        "dtype": None,
        "n_elements": 0,
    }
    assert module_memory(object())["size_bytes"] == 0


def test_within_a_shared_block_a_module_is_walked_once_and_each_answer_is_a_copy():
    module, other_module = Counted(2, 2), Counted(3, 3)
    with shared_module_memory():
        first = module_memory(module)
        first["bytes_by_device"]["cpu"] = -1
        second = module_memory(module)
        other = module_memory(other_module)
    assert (module.walks, other_module.walks) == (1, 1)
    assert second["bytes_by_device"] == {"cpu": 24} and other["size_bytes"] == 48
    module_memory(module)
    assert module.walks == 2  # outside the block: walked again


class Patcher:
    def __init__(self, **attrs):
        self.model = torch.nn.Linear(2, 2)
        self.model.model_loaded_weight_memory = 0
        self.__dict__.update(attrs)


def test_a_patcher_without_patch_bookkeeping_has_unknown_counts():
    info = describe_patcher(Patcher(patches=["not", "a", "dict"]))
    assert info["patcher_class"] == "Patcher" and info["n_patches"] is None
    assert info["load_device"] is None and info["offload_device"] is None and info["patches_uuid"] is None
    assert info["parent_object_id"] is None
    assert info["n_object_patches"] is None and info["object_patch_names"] is None
    assert info["memory_manager"] == "estimate" and info["loaded_weight_bytes"] == 0


def test_an_unreadable_loaded_size_is_none_with_its_reason():
    reasons = {}
    info = describe_patcher(Patcher(loaded_size=lambda: "much"), reasons)
    assert info["loaded_weight_bytes"] is None
    assert reasons["loaded_weight_bytes"] == "TypeError: loaded size is a str, not a number"
    info = describe_patcher(Patcher(loaded_size=lambda: 7.9))
    assert info["loaded_weight_bytes"] == 7


def test_object_patch_names_sorted_joined_and_bounded(monkeypatch):
    patches = {"model_sampling": 1, ("config", "a"): 2, 3: 3}
    assert object_patch_names(patches) == {
        "n_object_patches": 3,
        "object_patch_names": ["3", "config/a", "model_sampling"],
    }
    monkeypatch.setattr(state, "MAX_OBJECT_PATCHES_LISTED", 2)
    assert object_patch_names(patches) == {"n_object_patches": 3, "object_patch_names": ["3", "config/a"]}
    assert object_patch_names(None) == {"n_object_patches": None, "object_patch_names": None}
    assert object_patch_names({}) == {"n_object_patches": 0, "object_patch_names": []}


def test_the_device_is_where_most_bytes_sit_unless_the_module_says():
    module = Tensors([Meta("cuda:1", torch.float32, 10, 1), Meta("cpu", torch.float32, 30, 1)])
    info = describe_model(module)
    assert info["device"] == "cpu" and info["module_class"] == "Tensors"
    module.device = torch.device("cuda:1")
    assert describe_model(module)["device"] == "cuda:1"


def test_a_failing_walk_is_an_unknown_size_with_its_reason():
    class Failing:
        def parameters(self):
            raise RuntimeError("meta tensors")

    info = describe_model(Failing())
    assert info["size_bytes"] is None and info["bytes_by_device"] == {} and info["dtype"] is None
    assert info["unknown_reasons"] == {"size_bytes": "RuntimeError: meta tensors"}
    assert info["resident_bytes"] is None


def test_resident_bytes_the_patchers_count_else_what_sits_on_the_load_device():
    assert _resident({"loaded_weight_bytes": 5, "bytes_by_device": {"cuda:0": 9}}) == 5
    by_device = {"cuda": 1, "cuda:0": 2, "cuda:1": 4, "cudax": 8, "cpu": 16}
    assert _resident({"loaded_weight_bytes": 0, "load_device": "cuda", "bytes_by_device": by_device}) == 7
    assert _resident({"load_device": "cuda:1", "device": "cpu", "bytes_by_device": by_device}) == 4
    assert _resident({"device": "cpu", "bytes_by_device": by_device}) == 16
    assert _resident({"device": "cpu", "bytes_by_device": None}) == 0
    assert _resident({"bytes_by_device": by_device}) is None


@pytest.mark.parametrize(
    "ratio, expected",
    [
        (None, (None, None)),
        (8, (8, None)),
        (2.5, (2.5, None)),
        ([4, 8, 8], ([4, 8, 8], None)),
        ((4, 8), ([4, 8], None)),
        (
            [len, 8, 8],
            (
                [None, 8, 8],
                "part(s) 0 are functions of the input size, not numbers (see the step's spatial/temporal_compression_ratio)",
            ),
        ),
        (
            [len, True, 8],
            (
                [None, None, 8],
                "part(s) 0, 1 are functions of the input size, not numbers (see the step's spatial/temporal_compression_ratio)",
            ),
        ),
        (True, (None, "a bool, not a number (see the step's compression ratios)")),
        (len, (None, "a builtin_function_or_method, not a number (see the step's compression ratios)")),
    ],
)
def test_a_vae_compression_ratio_as_json_numbers(ratio, expected):
    assert _compression_ratio(ratio) == expected


class VAE:
    def __init__(self, **attrs):
        self.first_stage_model = torch.nn.Conv2d(3, 4, 1)
        self.__dict__.update(attrs)


def test_a_vae_says_its_own_device_dtype_latent_shape_and_the_ratio_reason():
    info = describe_vae(
        VAE(
            device="cuda:0",
            vae_dtype=torch.bfloat16,
            latent_channels=16,
            latent_dim=3,
            downscale_ratio=[len, 8, 8],
        )
    )
    assert info["kind"] == "vae" and info["class"] == "VAE" and info["module_class"] == "Conv2d"
    assert info["device"] == "cuda:0" and info["dtype"] == "bfloat16"
    assert (info["latent_channels"], info["latent_dim"], info["downscale_ratio"]) == (16, 3, [None, 8, 8])
    assert info["unknown_reasons"]["downscale_ratio"].startswith("part(s) 0 are functions")
    assert info["resident_bytes"] == 0  # nothing on cuda:0
    bare = describe_vae(VAE())
    assert bare["device"] == "cpu" and bare["dtype"] == "float32" and bare["resident_bytes"] == 64
    assert bare["latent_channels"] is None and bare["downscale_ratio"] is None
    assert "downscale_ratio" not in bare["unknown_reasons"] and "n_patches" not in bare


def test_a_vae_with_a_patcher_describes_it():
    info = describe_vae(VAE(patcher=Patcher(patches={"a": 1}, load_device="cpu")))
    assert info["n_patches"] == 1 and info["load_device"] == "cpu" and info["patcher_class"] == "Patcher"


class Clip:
    def __init__(self, patcher=None, tokenizer=None):
        self.cond_stage_model = torch.nn.Linear(4, 4)
        self.patcher = patcher
        if tokenizer is not None:
            self.tokenizer = tokenizer


def test_a_clip_names_its_tokenizer_and_its_patcher():
    class SDTokenizer:
        pass

    info = describe_clip(Clip(Patcher(patches={}, load_device="cpu"), SDTokenizer()))
    assert info["kind"] == "clip" and info["tokenizer_class"] == "SDTokenizer"
    assert info["n_patches"] == 0 and info["size_bytes"] == 80 and info["resident_bytes"] == 80
    bare = describe_clip(Clip())
    assert bare["tokenizer_class"] is None and "n_patches" not in bare
    assert bare["unknown_reasons"]["tokenizer_class"].startswith("AttributeError")


def test_a_model_without_a_module_or_patches():
    info = describe_model(object())
    assert info["module_class"] == "object" and "n_patches" not in info and "model_type" not in info
    nothing = describe("clip", type("C", (), {})())
    assert (
        nothing["module_class"] is None and nothing["size_bytes"] is None and nothing["bytes_by_device"] == {}
    )


def test_a_models_type_and_dtype_from_its_patcher():
    class Kind:
        name = "EPS"

    patcher = Patcher(patches={}, model_dtype=lambda: torch.bfloat16)
    patcher.model.model_type = Kind()
    info = describe_model(patcher)
    assert info["dtype"] == "bfloat16" and info["model_type"] == "EPS"
    failing = Patcher(patches={}, model_dtype=lambda: (_ for _ in ()).throw(RuntimeError("no dtype")))
    info = describe_model(failing)
    assert info["dtype"] == "float32"  # the module's own, the patcher's unknown
    assert info["unknown_reasons"]["dtype"] == "RuntimeError: no dtype"
    assert info["model_type"] is None and info["unknown_reasons"]["model_type"].startswith("AttributeError")


def test_a_read_that_fails_without_a_reasons_dict_is_still_none():
    info = describe_patcher(Patcher(loaded_size=lambda: "much"))
    assert info["loaded_weight_bytes"] is None


def test_fifty_object_patches_are_listed():
    listed = object_patch_names({f"p{i:02}": i for i in range(51)})
    assert listed["n_object_patches"] == 51 and listed["object_patch_names"] == [
        f"p{i:02}" for i in range(50)
    ]


class OwnWalk(torch.nn.Module):
    """A torch module that lists its tensors its own way: asked through its methods, not walked."""

    def __init__(self):
        super().__init__()
        self.inner = torch.nn.Linear(4, 4)

    def parameters(self, recurse=True):
        return iter([self.inner.bias])

    def buffers(self, recurse=True):
        return iter([])

    def named_parameters(self, *args, **kwargs):
        return iter([("inner.bias", self.inner.bias)])

    def named_buffers(self, *args, **kwargs):
        return iter([])

    def named_modules(self, *args, **kwargs):
        return iter([("", self)])

    def _named_members(self, *args, **kwargs):
        return iter([])


def test_a_module_with_its_own_listing_is_asked_not_walked():
    memory = module_memory(OwnWalk())
    assert memory["size_bytes"] == 16 and memory["n_elements"] == 4  # the bias only
