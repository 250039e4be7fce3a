"""VAE encoding that survives running out of memory: direct -> tiled -> cpu -> dummy.

Works on any object with ComfyUI's VAE interface (duck typing): `encode(pixels)`,
`encode_tiled(pixels, tile_x, tile_y, overlap, tile_t, overlap_t)`, and for predictions
`memory_used_encode(shape, dtype)`, `device`, `vae_dtype`, `downscale_ratio`, `latent_dim`.
The ComfyUI adapter supplies the parts that need ComfyUI (free memory as ComfyUI sees it, cache
cleanup, encoding on the CPU); tests pass fakes that raise out-of-memory at chosen strategies.

`auto` asks the VAE's own memory estimate for this input and the free memory of its device,
and skips a strategy that cannot fit as long as a later one can still run, so a too-large input
goes straight to tiled instead of failing once first. The estimate is calibrated by what earlier
attempts in this process measured for the same model, device type and dtype (calibration.py);
without a measurement, auto skips only when even half the estimate would not fit. Every strategy
is recorded as an Attempt: outcome, error, time, peak memory (a nested Span), the prediction and
whether it held; every attempt that ran teaches the calibration.

Only out-of-memory errors move on to the next strategy; anything else stops the chain. The chain
never keeps an exception raised by an out-of-memory attempt: the error is turned into text and
cleanup runs after the except block, so tensors the exception's frames hold can be freed.
"""

from __future__ import annotations

import dataclasses
import gc
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..probes import DETAIL_FULL, DETAIL_LIGHT, Probes
from ..report import Finding, format_bytes
from ..span import Span, SpanResult
from .calibration import (
    MEASURED,
    PROCESS_TABLE,
    RAN_OUT,
    UNCALIBRATED_OVERESTIMATE,
    CalibrationTable,
    calibration_key,
)
from .geometry import (
    Prediction,
    TileSettings,
    _weights_to_load,
    check_input,
    comfy_retry_tiles,
    device_name,
    dummy_latent,
    predict,
    usable_tiles,
)

log = logging.getLogger(__name__)

STRATEGIES = ("direct", "tiled", "cpu", "dummy")
REQUESTS = ("auto", "direct", "tiled", "cpu")  # what the user can choose; auto starts at direct
OK, OOM, ERROR, SKIPPED = "ok", "oom", "error", "skipped"
# RuntimeError texts of allocators that ran out (CPU: "DefaultCPUAllocator: can't allocate memory",
# Windows: "not enough memory"; MPS/XPU/older CUDA builds: "... out of memory").
OOM_MESSAGE_MARKERS = ("can't allocate memory", "not enough memory", "out of memory")
MAX_ERROR_MESSAGE_CHARS = 1000


def is_out_of_memory(exc: BaseException) -> bool:
    """CUDA's OutOfMemoryError, Python's MemoryError, or a RuntimeError from an allocator that ran out."""
    import torch

    oom_types = tuple(
        t
        for t in (getattr(torch, "OutOfMemoryError", None), getattr(torch.cuda, "OutOfMemoryError", None))
        if isinstance(t, type)
    )
    if isinstance(exc, (MemoryError, *oom_types)):
        return True
    return isinstance(exc, RuntimeError) and any(m in str(exc).lower() for m in OOM_MESSAGE_MARKERS)


def read_free_memory(device) -> int | None:
    """Free bytes of a device as the process can use them: available RAM, or CUDA free + cached.
    None for other devices; a failed read raises, so that the chain records why."""
    name = str(device)
    if name.startswith("cuda"):
        import torch

        index = int(name.split(":")[1]) if ":" in name else torch.cuda.current_device()
        free, _total = torch.cuda.mem_get_info(index)
        cached = torch.cuda.memory_reserved(index) - torch.cuda.memory_allocated(index)
        return int(free + max(0, cached))
    if name.startswith("cpu"):
        import psutil

        return int(psutil.virtual_memory().available)
    return None


def release_memory() -> None:
    """Default cleanup between attempts: collect garbage and return cached CUDA blocks."""
    gc.collect()
    try:
        import torch

        if torch.cuda.is_available() and torch.cuda.is_initialized():
            torch.cuda.empty_cache()
    except Exception as exc:
        log.debug("pipeline monitor: empty_cache failed: %s", exc)


@dataclass(frozen=True)
class Attempt:
    strategy: str
    outcome: str  # ok | oom | error | skipped
    reason: str | None = None
    error_type: str | None = None
    error_message: str | None = None
    duration_s: float | None = None
    peaks: dict = field(default_factory=dict)  # metric -> {"value", "at_s"}: RSS, GPU allocated/reserved
    prediction: Prediction | None = None
    prediction_held: bool | None = None
    cleanup_reclaimed_bytes: int | None = None
    notes: tuple[str, ...] = ()  # log lines seen during the attempt that matter (watch_log_messages)
    memory_snapshot: dict | None = None  # what was loaded when it ran out of memory (options.memory_snapshot)

    def to_dict(self) -> dict:
        data = dict(self.__dict__)
        data["prediction"] = None if self.prediction is None else self.prediction.to_dict()
        data["notes"] = list(self.notes)
        return data


@dataclass
class ChainOptions:
    strategy: str = "auto"
    allow_dummy: bool = False
    # None: ComfyUI's own retry tiling for the VAE's dimensionality (comfy_retry_tiles)
    tiles: TileSettings | None = field(default_factory=TileSettings)
    free_memory: Callable[[str], int | None] = read_free_memory  # device name -> free bytes
    cleanup: Callable[[], None] = release_memory
    cpu_encode: Callable[[Any, Any], Any] | None = None  # (vae, pixels) -> latent, run on the CPU
    watch_log_messages: tuple[str, ...] = ()  # e.g. ComfyUI's "retrying with tiled" warning
    probes: Probes | None = None
    memory_snapshot: Callable[[], dict] | None = None  # plain data on what is loaded, read at an OOM
    # Measured/estimated ratios of earlier attempts (per process by default); None: the raw estimate.
    calibration: CalibrationTable | None = field(default_factory=lambda: PROCESS_TABLE)


@dataclass
class ChainResult:
    requested: str
    tiles: TileSettings = field(default_factory=TileSettings)  # as used (overlap may be reduced)
    samples: Any = None  # the latent; the caller passes it on, reports never keep it
    strategy_used: str | None = None
    attempts: list[Attempt] = field(default_factory=list)
    predictions: dict[str, Prediction] = field(default_factory=dict)
    input_findings: tuple[Finding, ...] = ()
    pixels_info: dict | None = None
    device: str | None = None
    free_before_bytes: int | None = None
    free_after_bytes: int | None = None
    span: SpanResult | None = None
    error: str | None = None
    error_kind: str | None = None  # bad_input | out_of_memory | error
    exception: BaseException | None = None  # only a non-OOM error that stopped the chain
    monitor_errors: list[str] = field(default_factory=list)

    @property
    def cleanup_reclaimed_bytes(self) -> int | None:
        values = [a.cleanup_reclaimed_bytes for a in self.attempts if a.cleanup_reclaimed_bytes is not None]
        return sum(values) if values else None


def strategy_plan(requested: str) -> tuple[str, ...]:
    start = "direct" if requested == "auto" else requested
    if start not in STRATEGIES[:-1]:
        raise ValueError(f"unknown strategy {requested!r}: choose one of {', '.join(REQUESTS)}")
    return STRATEGIES[STRATEGIES.index(start) :]


class _LogWatch(logging.Handler):
    """Collects log lines containing any of the watched texts while an attempt runs."""

    def __init__(self, texts: tuple[str, ...]):
        super().__init__(logging.DEBUG)
        self.texts = texts
        self.seen: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        try:
            message = record.getMessage()
        except Exception:
            return
        if any(text in message for text in self.texts) and len(self.seen) < 10:
            self.seen.append(message[:300])


def _peaks(result: SpanResult | None, device: str | None) -> dict:
    if result is None:
        return {}
    wanted = {"rss": "process_rss_bytes"}
    gpu = device if device and device.startswith("cuda") else None
    if gpu is not None and ":" not in gpu:
        gpu = "cuda:0"
    if gpu is not None:
        wanted["gpu_allocated"] = f"{gpu}.allocated_bytes"
        wanted["gpu_reserved"] = f"{gpu}.reserved_bytes"
    peaks = {}
    for label, metric in wanted.items():
        peak = result.peaks.get(metric)
        if peak is not None and peak.value is not None:
            peaks[label] = {"value": int(peak.value), "at_s": peak.at_s, "metric": metric}
    return peaks


def _surely_too_large(prediction: Prediction) -> bool:
    """Without a calibration: would even the estimate shrunk by UNCALIBRATED_OVERESTIMATE not fit?"""
    if prediction.estimate_bytes is None or prediction.free_bytes is None:
        return False
    lowest = prediction.estimate_bytes / UNCALIBRATED_OVERESTIMATE + (prediction.weights_to_load_bytes or 0)
    return lowest > prediction.free_bytes


def _held(prediction: Prediction | None, outcome: str, notes: tuple[str, ...]) -> bool | None:
    if prediction is None or prediction.fits is None or outcome not in (OK, OOM):
        return None
    ran_out = outcome == OOM or bool(notes)  # notes: the VAE ran out and retried on its own
    return prediction.fits != ran_out


class VAEChain:
    """One run of the chain over one input."""

    def __init__(self, vae, pixels, options: ChainOptions):
        self.vae = vae
        self.pixels = pixels
        self.options = options
        self.result = ChainResult(requested=options.strategy, tiles=options.tiles or comfy_retry_tiles(vae))

    def run(self) -> ChainResult:
        result = self.result
        check = check_input(self.vae, self.pixels)
        result.tiles, tile_findings = usable_tiles(self.vae, result.tiles)
        result.input_findings, result.pixels_info = check.findings + tile_findings, check.pixels
        if check.fatal:
            result.error, result.error_kind = check.fatal, "bad_input"
            return result
        try:
            plan = strategy_plan(self.options.strategy)
        except ValueError as exc:
            result.error, result.error_kind = str(exc), "bad_input"
            return result
        result.device = device_name(self.vae)
        shape = tuple(self.pixels.shape)
        for strategy in ("direct", "tiled", "cpu"):
            try:
                result.predictions[strategy] = predict(
                    self.vae,
                    shape,
                    strategy,
                    result.tiles,
                    self.options.free_memory,
                    self._calibration(strategy),
                )
            except Exception as exc:  # a prediction is advice: never let it stop the encode
                result.monitor_errors.append(f"prediction for {strategy}: {type(exc).__name__}: {exc}")
        span = Span("vae_encode", probes=self.options.probes, detail=DETAIL_FULL).start()
        result.free_before_bytes = self._free()
        try:
            self._run_plan(plan)
        finally:
            result.free_after_bytes = self._free()
            result.span = span.stop()
        return result

    def _device_of(self, strategy: str) -> str | None:
        return "cpu" if strategy == "cpu" else self.result.device

    def _calibration(self, strategy: str):
        """The table's calibration for the device this strategy runs on, or why there is none."""
        table = self.options.calibration
        if table is None:
            return "calibration is off (ChainOptions.calibration is None)"
        key = calibration_key(self.vae, self._device_of(strategy))
        if key is None:
            return "the VAE has no device"
        found = table.lookup(key)
        if found is None:
            return f"no earlier encode of {key[0]} on {key[1]} ({key[2]}) measured in this process"
        return found

    def _learn(self, strategy: str, outcome: str, notes, span_result, weights_loaded: int | None) -> None:
        """One sample for the calibration table from an attempt that ran (see calibration.py)."""
        table, prediction = self.options.calibration, self.result.predictions.get(strategy)
        if table is None or prediction is None or not prediction.estimate_bytes or outcome not in (OK, OOM):
            return
        device = self._device_of(strategy)
        gpu = device if device and device.startswith("cuda") else None
        metric = "process_rss_bytes" if gpu is None else f"{gpu if ':' in gpu else 'cuda:0'}.allocated_bytes"
        if gpu is None and not (device or "").startswith("cpu"):
            return  # no peak counter for this device type (mps, xpu, ...)
        # Models ComfyUI unloads during the attempt lower the rise, so such a sample comes out low;
        # the lower bound of a later attempt that runs out corrects it.
        rise = None if span_result is None else span_result.above_start(metric)
        measured = None if rise is None else rise - (weights_loaded or 0)
        ran_out = outcome == OOM or bool(notes)
        if ran_out:
            free = prediction.free_bytes
            floor = None if free is None else free - (prediction.weights_to_load_bytes or 0)
            known = [v for v in (measured, floor) if v is not None]
            if known:
                table.record(
                    calibration_key(self.vae, device),
                    max(known) / prediction.estimate_bytes,
                    strategy,
                    RAN_OUT,
                    prediction.estimate_bytes,
                    prediction.free_bytes,
                )
        elif measured is not None:
            table.record(
                calibration_key(self.vae, device),
                measured / prediction.estimate_bytes,
                strategy,
                MEASURED,
                prediction.estimate_bytes,
                prediction.free_bytes,
            )

    def _free(self) -> int | None:
        if self.result.device is None:
            return None
        try:
            return self.options.free_memory(self.result.device)
        except Exception as exc:
            self.result.monitor_errors.append(f"free memory: {type(exc).__name__}: {exc}")
            return None

    def _run_plan(self, plan: tuple[str, ...]) -> None:
        result = self.result
        for index, strategy in enumerate(plan):
            reason = self._skip_reason(strategy, plan[index + 1 :])
            if reason is not None:
                self._record(strategy, SKIPPED, reason=reason)
                continue
            outcome = self._attempt(strategy)
            if outcome == OK:
                result.strategy_used = strategy
                return
            if outcome == ERROR:
                return
            # Out of memory: free what we can before the next strategy (outside the except block).
            self._cleanup_after_last_attempt()
        tried = [f"{a.strategy} ({a.reason or a.error_message})" for a in result.attempts if a.outcome == OOM]
        result.error_kind = "out_of_memory"
        result.error = (
            "VAE encode ran out of memory with every strategy: "
            + ("; ".join(tried) or "none could run")
            + ". Lower tile_size / temporal_size, free memory (unload models), or turn on allow_dummy "
            "to continue with zero latents."
        )

    def _skip_reason(self, strategy: str, later: tuple[str, ...]) -> str | None:
        options = self.options
        if strategy == "dummy":
            return None if options.allow_dummy else "allow_dummy is off"
        if strategy == "cpu":
            if options.cpu_encode is None:
                return "no CPU encoder available"
            if (self.result.device or "").startswith("cpu") and self.result.requested != "cpu":
                return "the VAE already runs on the CPU: cpu would repeat direct"
        if options.strategy != "auto":
            return None
        prediction = self.result.predictions.get(strategy)
        if prediction is None or prediction.fits is not False:
            return None
        calibrated = prediction.calibration_ratio is not None
        if not calibrated and not _surely_too_large(prediction):
            return None  # the raw estimate is cautious: one try teaches the calibration
        if not any(self._can_run(s) for s in later):
            return None  # last real strategy: try it even against the prediction
        why = (
            prediction.calibration_source
            if calibrated
            else f"uncalibrated: even {1 / UNCALIBRATED_OVERESTIMATE:g} of the VAE's estimate would not fit"
        )
        return (
            f"predicted not to fit: needs {format_bytes(prediction.needed_bytes)}, "
            f"{format_bytes(prediction.free_bytes)} free on {prediction.device} ({why})"
        )

    def _can_run(self, strategy: str) -> bool:
        if strategy == "dummy":
            return False
        if strategy == "cpu":
            return self.options.cpu_encode is not None and not (self.result.device or "").startswith("cpu")
        return True

    def _encode(self, strategy: str):
        import torch

        vae, pixels = self.vae, self.pixels
        if strategy == "dummy":
            return dummy_latent(vae, pixels)
        # Tiled encoding needs inference mode (ComfyUI's tiler is decorated with it); the executor
        # provides it, callers outside it (tests, scripts) do not.
        with torch.inference_mode():
            if strategy == "direct":
                return vae.encode(pixels)
            if strategy == "tiled":
                return vae.encode_tiled(pixels, **self.result.tiles.encode_kwargs())
            return self.options.cpu_encode(vae, pixels)

    def _attempt(self, strategy: str) -> str:
        watch = _LogWatch(self.options.watch_log_messages) if self.options.watch_log_messages else None
        root = logging.getLogger()
        if watch is not None:
            root.addHandler(watch)
        weights_loaded = None
        if self.options.calibration is not None:  # what this attempt loads is no part of the encode's need
            weights_loaded, _ = _weights_to_load(self.vae, self._device_of(strategy))
        span = Span(f"vae_encode {strategy}", probes=self.options.probes, detail=DETAIL_LIGHT).start()
        started = time.monotonic()
        samples, error_type, error_message, outcome, snapshot = None, None, None, OK, None
        try:
            samples = self._encode(strategy)
            if samples is None:
                raise RuntimeError(f"{strategy} encode returned no latent")
        except Exception as exc:
            outcome = OOM if is_out_of_memory(exc) else ERROR
            error_type = type(exc).__name__
            error_message = str(exc)[:MAX_ERROR_MESSAGE_CHARS]
            if outcome == ERROR:
                self.result.exception = exc  # the chain stops here; the caller re-raises or wraps it
            else:
                snapshot = self._memory_snapshot()  # now, before any cleanup changes the picture
        finally:
            duration = time.monotonic() - started
            span_result = span.stop()
            if watch is not None:
                root.removeHandler(watch)
        notes = tuple(watch.seen) if watch is not None else ()
        try:
            self._learn(strategy, outcome, notes, span_result, weights_loaded)
        except Exception as exc:  # calibration is advice: never let it change the encode's outcome
            self.result.monitor_errors.append(f"calibration: {type(exc).__name__}: {exc}")
        prediction = self.result.predictions.get(strategy)
        self._record(
            strategy,
            outcome,
            error_type=error_type,
            error_message=error_message,
            duration_s=duration,
            peaks=_peaks(span_result, self.result.device if strategy != "cpu" else "cpu"),
            prediction=prediction,
            prediction_held=_held(prediction, outcome, notes),
            notes=notes,
            memory_snapshot=snapshot,
        )
        if outcome == OK:
            self.result.samples = samples
        elif outcome == ERROR:
            self.result.error_kind = "error"
            self.result.error = f"VAE encode ({strategy}) failed with {error_type}: {error_message}"
        return outcome

    def _memory_snapshot(self) -> dict | None:
        if self.options.memory_snapshot is None:
            return None
        try:
            return self.options.memory_snapshot()
        except Exception as exc:
            self.result.monitor_errors.append(f"memory snapshot: {type(exc).__name__}: {exc}")
            return None

    def _record(self, strategy: str, outcome: str, **fields) -> None:
        if fields.get("prediction") is None and outcome == SKIPPED:
            fields["prediction"] = self.result.predictions.get(strategy)
        self.result.attempts.append(Attempt(strategy, outcome, **fields))

    def _cleanup_after_last_attempt(self) -> None:
        before = self._free()
        try:
            self.options.cleanup()
        except Exception as exc:
            self.result.monitor_errors.append(f"cleanup: {type(exc).__name__}: {exc}")
        after = self._free()
        reclaimed = None if before is None or after is None else after - before
        last = self.result.attempts[-1]
        self.result.attempts[-1] = dataclasses.replace(last, cleanup_reclaimed_bytes=reclaimed)


def run_chain(vae, pixels, options: ChainOptions | None = None) -> ChainResult:
    """Encode `pixels` with `vae` through the chain. Failures come back in the result, not raised."""
    return VAEChain(vae, pixels, options or ChainOptions()).run()
