"""PipelineMonitorVAEEncode: VAE encode that survives running out of memory (step kind `vae_encode`).

The chain and the report live in monitors/vae/chain.py and monitors/vae/report.py; this file
adds what needs ComfyUI: free memory as ComfyUI's loader sees it, cache cleanup, and encoding on
the CPU through a temporary CPU view of the VAE.
"""

from __future__ import annotations

import copy
import gc
import logging
import time

import torch
from comfy_api.latest import io

from ..monitors.models.patching import MEMORY_MANAGER_DYNAMIC, memory_manager
from ..monitors.probes import get_probes
from ..monitors.report import failed_step
from ..monitors.vae import STAGE
from ..monitors.vae.chain import run_chain
from ..monitors.vae.comfy_retry import COMFY_RETRY_TILERS
from ..monitors.vae.errors import error_for
from ..monitors.vae.free_memory import DYNAMIC, ESTIMATE_BASED, usable_gpu_free
from ..monitors.vae.geometry import TileSettings, tiles_from_inputs
from ..monitors.vae.outcomes import REQUESTS, ChainOptions, CpuEncoded
from ..monitors.vae.report import build_vae_encode_step, log_findings
from .memory_snapshot import loaded_models_snapshot
from .node_support import hidden_inputs, record_step, run_monitor

log = logging.getLogger(__name__)

NODE_ID = STAGE.node
# The attributes ComfyUI's loading sets on a layer to cast its weights per operation.
CAST_FLAGS = ("comfy_cast_weights", "prev_comfy_cast_weights")
# ComfyUI's VAE.encode logs this when it catches a CUDA OOM and retries tiled on its own.
COMFY_TILED_RETRY_WARNING = "Ran out of memory when regular VAE encoding"


def free_memory_reader(vae, probes=None):
    """device name -> memory an encode there can get (monitors/vae/free_memory.py): on a GPU
    ComfyUI's free memory, plus what ComfyUI would really unload from other models
    (reclaimable_bytes), less its reserve, capped by this process's memory fraction.
    A failed read raises: the chain records why (prediction's free_bytes_unknown_reason, the step's
    monitor_errors) instead of a bare None."""

    def read(device_name: str):
        import comfy.model_management as mm

        probes_ = probes or get_probes()
        device = torch.device(device_name)
        if device.type == "cpu":
            # ComfyUI's figure for the CPU is the system's available memory (psutil's, which parses
            # all of /proc/meminfo): the probe reads the same MemAvailable from its kept-open file.
            memory = probes_.system_memory()
            return int(memory["available_bytes"]) if memory else int(mm.get_free_memory(device))
        patcher = getattr(vae, "patcher", None)
        free, manager, source = comfy_free_memory(mm, patcher, device)
        reclaimable = reclaimable_bytes(mm.current_loaded_models, patcher, device, manager)
        limit, allocated = None, None
        index = device.index or 0
        if device.type == "cuda" and index < probes_.torch_device_count():
            limit = probes_.gpu_process_limit(index)
            allocated = (probes_.torch_memory(index) or {}).get("allocated_bytes")
        return usable_gpu_free(
            free, manager, int(reclaimable), int(mm.extra_reserved_memory()), limit, allocated, source
        )

    return read


def reclaimable_bytes(loaded_models, patcher, device, manager: str) -> int:
    """What ComfyUI would unload from the other models on `device` to load the VAE's patcher.

    Loading a dynamic patcher, ComfyUI never unloads another dynamic model (`free_memory(...,
    for_dynamic=True)`: dynamic VRAM evicts their weights on demand), and what it can evict is
    already in the patcher's free memory (`vbars_analyze`): only the other, estimate-based models
    count. Loading an estimate-based patcher, ComfyUI unloads any model, dynamic ones whole."""
    return sum(
        loaded.model_loaded_memory()
        for loaded in list(loaded_models)
        if loaded.device == device
        and loaded.model is not None
        and loaded.model is not patcher
        and not (manager == DYNAMIC and memory_manager(loaded.model) == MEMORY_MANAGER_DYNAMIC)
    )


def comfy_free_memory(mm, patcher, device) -> tuple[int, str, str]:
    """(free bytes, memory manager, which call) as ComfyUI counts it for loading the VAE's patcher.

    A dynamic patcher: `patcher.get_free_memory` (the driver's free plus what dynamic VRAM can
    evict, as the VAE's own encode sizes its batches); an estimate-based one (or a ComfyUI before
    0.33): `model_management.get_free_memory`, without dynamic VRAM's headroom, since loading it
    unloads the dynamic models whole and reclaimable_bytes counts them. The manager is told by
    `patcher.is_dynamic()` alone (memory_manager), whatever the device (CUDA, ROCm, XPU)."""
    getter = getattr(patcher, "get_free_memory", None)
    if callable(getter) and memory_manager(patcher) == MEMORY_MANAGER_DYNAMIC:
        return int(getter(device)), DYNAMIC, "ComfyUI's ModelPatcher.get_free_memory"
    return int(mm.get_free_memory(device)), ESTIMATE_BASED, "ComfyUI's get_free_memory"


def comfy_cleanup() -> None:
    """Between attempts: drop garbage (the failed attempt's tensors) and return cached VRAM."""
    import comfy.model_management as mm

    gc.collect()
    mm.soft_empty_cache()


def encode_on_cpu(vae, pixels, monitor_errors: list[str] | None = None) -> CpuEncoded:
    """Encode on the CPU without leaving the VAE moved, converted or duplicated.

    The VAE is unloaded first, as ComfyUI unloads any model (weights to its offload device): a
    patcher that is still loaded would keep its weights where they are when a clone loads (ComfyUI
    skips loading a module it finds fully loaded), and the encode would mix devices. Then a
    shallow copy of the VAE gets a non-dynamic clone of its patcher whose load device is the CPU
    (cpu_patcher: the same weights module, or under dynamic VRAM a fresh copy from the loader), and
    encodes with ComfyUI's own code; afterwards the clone is unloaded too. The VAE object itself is
    never changed, and the next encode loads it onto its device as usual.

    The encode runs in ComfyUI's dtype for a VAE on the CPU (`--cpu-vae`: float32 unless a VAE
    dtype is forced), with weights and input in agreement (agree_weights): a fresh copy is
    converted, the shared module is cast per operation. The GPU's working dtype (bf16, fp16) would
    not do: a fresh copy keeps the file's dtype, and half precision on the CPU is slow.
    """
    cpu = torch.device("cpu")
    dynamic = memory_manager(vae.patcher) == MEMORY_MANAGER_DYNAMIC
    detached = unload_patcher(vae.patcher, monitor_errors) and dynamic
    started = time.monotonic()
    patcher, reloaded = cpu_patcher(vae.patcher)
    reload_s = time.monotonic() - started if reloaded else None
    dtype = cpu_vae_dtype(vae)
    view = copy.copy(vae)
    view.device, view.vae_dtype = cpu, dtype
    view.patcher = patcher
    view.patcher.load_device = cpu
    view.first_stage_model = patcher.model  # a non-dynamic clone may hold a fresh copy
    restore = agree_weights(patcher, dtype, shared=patcher.model is vae.patcher.model)
    try:
        samples = view.encode(pixels)
    finally:
        unload_patcher(view.patcher, monitor_errors)
        restore()
    return CpuEncoded(samples, str(dtype).replace("torch.", ""), reload_s, detached)


def cpu_vae_dtype(vae):
    """ComfyUI's dtype for this VAE on the CPU, as `--cpu-vae` picks it (float32 unless forced)."""
    import comfy.model_management as mm

    return mm.vae_dtype(torch.device("cpu"), getattr(vae, "working_dtypes", [torch.float32]))


def agree_weights(patcher, dtype, shared: bool):
    """Make the weights the CPU encode uses agree with its input's dtype; returns the undo.

    A fresh copy (dynamic VRAM's reload) is ours: it is converted. The shared module is the VAE's
    own and never converted in place: where its weights are of another dtype, the clone casts them
    per operation (ComfyUI's set_model_compute_dtype), and the cast flags that loading leaves on the
    module's layers are put back afterwards."""
    module = patcher.model
    if not shared:
        module.to(dtype)
        return lambda: None
    if all(p.dtype == dtype for p in module.parameters() if p.dtype.is_floating_point):
        return lambda: None
    kept = [
        (layer, {name: layer.__dict__[name] for name in CAST_FLAGS if name in layer.__dict__})
        for layer in module.modules()
        if hasattr(layer, "comfy_cast_weights")
    ]
    patcher.set_model_compute_dtype(dtype)

    def restore():
        for layer, flags in kept:
            for name in CAST_FLAGS:
                layer.__dict__.pop(name, None)
            layer.__dict__.update(flags)

    return restore


def cpu_patcher(patcher):
    """(a clone of `patcher` that can load on the CPU, whether it reloaded the weights from the file).

    A dynamic-VRAM patcher (ModelPatcherDynamic) keeps per-device state (`dynamic_pins[load_device]`)
    that has no CPU entry: a clone of it with the CPU as load device raises KeyError on load.
    ComfyUI's own way out is `clone(disable_dynamic=True)`: a plain ModelPatcher over a fresh copy of
    the weights from the loader. Where that is refused (no loader to reload from), the same call
    over the patcher's own module (`model_override`): a plain ModelPatcher made by clone(), so that
    no constructor default (0.38's `fast_disk`) is assumed. A ComfyUI without that keyword gets a
    plain ModelPatcher built as ComfyUI builds one for a CPU load device. An estimate-based patcher
    clones as always."""
    if memory_manager(patcher) != MEMORY_MANAGER_DYNAMIC:
        return patcher.clone(), False
    try:
        return patcher.clone(disable_dynamic=True), True
    except Exception as exc:
        log.info("pipeline monitor: no non-dynamic reload of the VAE (%s), encoding with its own weights", exc)
    try:
        return patcher.clone(disable_dynamic=True, model_override=patcher.get_clone_model_override()), False
    except (AttributeError, TypeError) as exc:
        log.info("pipeline monitor: no clone over the VAE's own weights (%s), using a plain patcher", exc)
    import comfy.model_patcher

    cpu = torch.device("cpu")
    plain = comfy.model_patcher.ModelPatcher(
        patcher.model, load_device=cpu, offload_device=patcher.offload_device, size=patcher.model_size()
    )
    return plain, False


def unload_patcher(patcher, monitor_errors: list[str] | None = None) -> bool:
    """Remove a patcher from ComfyUI's loaded models and unload it (weights to its offload device);
    whether it was loaded. A failed unload goes to `monitor_errors` (the step's), as the encode
    itself can go on."""
    import comfy.model_management as mm

    found = False
    for index in range(len(mm.current_loaded_models) - 1, -1, -1):
        loaded = mm.current_loaded_models[index]
        if loaded.model is patcher:
            found = True
            mm.current_loaded_models.pop(index)
            try:
                loaded.model_unload()
            except Exception as exc:
                log.warning("pipeline monitor: unloading a VAE patcher failed: %s", exc)
                if monitor_errors is not None:
                    monitor_errors.append(f"unloading a VAE patcher: {type(exc).__name__}: {exc}")
    return found


def chain_options(
    vae, strategy, allow_dummy, tiles: TileSettings, monitor_errors: list[str] | None = None
) -> ChainOptions:
    """`monitor_errors` collects what the CPU encode's cleanup failed to do, for the step."""
    return ChainOptions(
        strategy=strategy,
        allow_dummy=bool(allow_dummy),
        tiles=tiles,
        free_memory=free_memory_reader(vae),
        cleanup=comfy_cleanup,
        cpu_encode=lambda vae_, pixels: encode_on_cpu(vae_, pixels, monitor_errors),
        watch_log_messages=(COMFY_TILED_RETRY_WARNING,),
        retry_tilers=COMFY_RETRY_TILERS,
        memory_snapshot=loaded_models_snapshot,
    )


def _is_interrupt(exc) -> bool:
    try:
        import comfy.model_management as mm

        return isinstance(exc, mm.InterruptProcessingException)
    except Exception:
        return False


class PipelineMonitorVAEEncode(io.ComfyNode):
    @classmethod
    def define_schema(cls) -> io.Schema:
        return io.Schema(
            node_id=NODE_ID,
            display_name="Pipeline Monitor: VAE Encode",
            category="pipeline_monitor",
            description="Encodes images or video frames like VAEEncode but survives running out of memory: "
            "direct -> tiled -> CPU (-> zero latents only if allowed). `auto` skips what the VAE's own "
            "estimate, calibrated by earlier encodes, says cannot fit. Reports the strategy, latent, memory "
            "and speed.",
            inputs=[
                io.Image.Input("pixels"),
                io.Vae.Input("vae"),
                io.Combo.Input(
                    "strategy",
                    options=list(REQUESTS),
                    default="auto",
                    tooltip="Where the chain starts. auto: direct unless the VAE's estimate (calibrated by "
                    "earlier encodes of this VAE) says it cannot fit in free memory. Out of memory moves "
                    "on: direct -> tiled -> cpu.",
                ),
                io.Boolean.Input(
                    "allow_dummy",
                    default=False,
                    tooltip="When every strategy runs out of memory, output zero latents (reported as an "
                    "error) instead of failing.",
                ),
                io.Int.Input(
                    "tile_size",
                    default=512,
                    min=0,
                    max=4096,
                    step=64,
                    tooltip="Tiled strategy's tile in pixels. 0: ComfyUI's own retry tiling for this VAE "
                    "(256 px for video VAEs, 512 px for image VAEs, overlap 64, no temporal tiling).",
                ),
                io.Int.Input("overlap", default=64, min=0, max=4096, step=32),
                io.Int.Input(
                    "temporal_size",
                    default=64,
                    min=0,
                    max=4096,
                    step=4,
                    tooltip="Only used for video VAEs: frames to encode at a time when tiled; 0: all frames at "
                    "once, as ComfyUI's own retry does.",
                ),
                io.Int.Input(
                    "temporal_overlap",
                    default=8,
                    min=4,
                    max=4096,
                    step=4,
                    tooltip="Only used for video VAEs: frames to overlap when tiled.",
                ),
            ],
            outputs=[io.Latent.Output(display_name="LATENT")],
            hidden=[io.Hidden.unique_id],
            is_output_node=True,  # reports even when its LATENT is not connected, as every monitor does
        )

    @classmethod
    def execute(
        cls,
        pixels,
        vae,
        strategy="auto",
        allow_dummy=False,
        tile_size=512,
        overlap=64,
        temporal_size=64,
        temporal_overlap=8,
    ) -> io.NodeOutput:
        node_id, _ = hidden_inputs(cls)
        tiles = tiles_from_inputs(vae, tile_size, overlap, temporal_size, temporal_overlap)
        cleanup_errors: list[str] = []
        try:
            result = run_chain(vae, pixels, chain_options(vae, strategy, allow_dummy, tiles, cleanup_errors))
            result.monitor_errors.extend(cleanup_errors)
        except Exception as exc:  # the chain's own code failed: encode as core VAEEncode does
            log.exception("pipeline monitor: VAE chain failed, encoding directly")
            record_step(failed_step(STAGE.kind, node_id, exc))
            return io.NodeOutput({"samples": vae.encode(pixels)})
        step, ui = run_monitor(
            STAGE.kind, node_id, lambda: build_vae_encode_step(node_id, result, vae, bool(allow_dummy))
        )
        log_findings(step, log)
        if result.samples is None:
            if result.exception is not None and _is_interrupt(result.exception):
                raise result.exception
            raise error_for(result, NODE_ID) from result.exception
        samples, result.samples = result.samples, None  # the report keeps no tensor
        return io.NodeOutput({"samples": samples}, ui=ui)
