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

When ComfyUI's own encode runs out of memory inside direct and retries tiled by itself
(comfy_retry.py), direct is recorded as out of memory and the retry as an attempt of its own,
`tiled (ComfyUI retry)`, which is then the strategy used.

Only out-of-memory errors move on to the next strategy; anything else stops the chain. The chain
never keeps an exception raised by an out-of-memory attempt: the error is turned into text and
cleanup runs after the except block, so tensors the exception's frames hold can be freed.
"""

from __future__ import annotations

import dataclasses
import logging
import time

from ..engine.span import Span, SpanResult
from ..probes import DETAIL_FULL, DETAIL_LIGHT
from ..report import format_bytes
from .calibration import (
    MEASURED,
    RAN_OUT,
    UNCALIBRATED_OVERESTIMATE,
    calibration_key,
)
from .comfy_retry import CAUGHT_MESSAGE, CAUGHT_REASON, RETRY_REASON, RETRY_STRATEGY, RetryWatch
from .free_memory import as_free_memory
from .geometry import (
    Prediction,
    _weights_to_load,
    check_input,
    device_name,
    dummy_latent,
    predict,
)
from .outcomes import (
    ERROR,
    MAX_ERROR_MESSAGE_CHARS,
    OK,
    OOM,
    SKIPPED,
    Attempt,
    ChainOptions,
    ChainResult,
    CpuEncoded,
    is_out_of_memory,
    strategy_plan,
)
from .tiles import comfy_retry_tiles, usable_tiles

log = logging.getLogger(__name__)
CPU_FACTS = ("compute_dtype", "weights_reload_s", "weights_detached")  # CpuEncoded -> the attempt's row


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
            reading = as_free_memory(self.options.free_memory(self.result.device))
        except Exception as exc:
            self.result.monitor_errors.append(f"free memory: {type(exc).__name__}: {exc}")
            return None
        self.result.free_memory_manager = self.result.free_memory_manager or reading.manager
        return reading.free_bytes

    def _run_plan(self, plan: tuple[str, ...]) -> None:
        result = self.result
        for index, strategy in enumerate(plan):
            reason = self._skip_reason(strategy, plan[index + 1 :])
            if reason is not None:
                self._record(strategy, SKIPPED, reason=reason)
                continue
            outcome = self._attempt(strategy)
            if outcome == OK:
                result.strategy_used = result.attempts[-1].strategy  # ComfyUI's own retry may have made it
                return
            if outcome == ERROR:
                return
            # Out of memory: free what we can before the next strategy (outside the except block).
            self._cleanup_after_last_attempt()
        tried = [f"{a.strategy} ({a.error_message or a.reason})" for a in result.attempts if a.outcome == OOM]
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
        calibrated = prediction.calibrated_estimate_bytes is not None
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
        """Run one strategy; returns the outcome of its last row (ComfyUI's own retry adds a row)."""
        tilers = self.options.retry_tilers if strategy == "direct" else ()
        watch = RetryWatch(self.vae, self.options.watch_log_messages, tilers)
        weights_loaded = None
        if self.options.calibration is not None:  # what this attempt loads is no part of the encode's need
            weights_loaded, _ = _weights_to_load(self.vae, self._device_of(strategy))
        span = Span(f"vae_encode {strategy}", probes=self.options.probes, detail=DETAIL_LIGHT).start()
        started = time.monotonic()
        samples, error_type, error_message, outcome, snapshot = None, None, None, OK, None
        cpu_facts = {}
        try:
            with watch:
                samples = self._encode(strategy)
            if isinstance(samples, CpuEncoded):
                cpu_facts = {name: getattr(samples, name) for name in CPU_FACTS}
                samples = samples.samples
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
            ended = time.monotonic()
            span_result = span.stop()
        retried = strategy == "direct" and watch.retried
        try:
            self._learn(strategy, OOM if retried else outcome, watch.notes, span_result, weights_loaded)
        except Exception as exc:  # calibration is advice: never let it change the encode's outcome
            self.result.monitor_errors.append(f"calibration: {type(exc).__name__}: {exc}")
        prediction = self.result.predictions.get(strategy)
        row = dict(
            duration_s=ended - started,
            peaks=_peaks(span_result, self.result.device if strategy != "cpu" else "cpu"),
            prediction=prediction,
            prediction_held=_held(prediction, OOM if retried else outcome, watch.notes),
            notes=watch.notes,
            **cpu_facts,
        )
        last = dict(error_type=error_type, error_message=error_message, memory_snapshot=snapshot)
        if retried:  # ComfyUI ran out inside direct and tiled by itself: two rows, the OOM counted
            caught = dict(reason=CAUGHT_REASON, caught_by_comfyui=True, error_message=CAUGHT_MESSAGE)
            self._record(strategy, OOM, **caught, **row)
            retry_s = None if watch.retry_started_s is None else ended - watch.retry_started_s
            self._record(RETRY_STRATEGY, outcome, reason=RETRY_REASON, duration_s=retry_s, **last)
        else:
            self._record(strategy, outcome, **row, **last)
        if outcome == OK:
            self.result.samples = samples
        elif outcome == ERROR:
            self.result.error_kind = "error"
            name = self.result.attempts[-1].strategy
            self.result.error = f"VAE encode ({name}) failed with {error_type}: {error_message}"
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
