"""Calibration of a VAE's own memory estimate from what earlier encodes in this process measured.

ComfyUI's `memory_used_encode` formulas are written per model family and are rough: the KL one is
commented "should be lower", and on the tiny WAN 2.1 VAE the estimate was 14x the measured peak.
Taken at its word, the estimate makes `auto` tile encodes that would have fit. Every attempt that
ran measured its own peak (the attempt's nested span), so the chain keeps, per (model class, device
type, dtype), the ratio measured / estimated of the last few attempts, and `auto` predicts
`estimate x ratio x SAFETY_MARGIN` from the largest of them.

What one attempt teaches:
- it finished: its peak above its start, less the VAE weights it had to load, over the estimate
  for the shape it encoded (for tiled: one tile);
- it ran out of memory (or the VAE ran out inside it and retried on its own): the need exceeded
  what was free, so the larger of the free memory it was predicted against and its peak is a
  lower bound, kept as a sample of its own so that the next encode of that size is not repeated
  against the same wall.
The largest sample is used, not the mean: one ratio that was too small costs a failed attempt,
one too large only a needless tiling. A failed attempt never becomes a measured ratio: measured
samples give `ratio` (used with the margin), samples that ran out give `lower_bound_ratio` (used as
it is: the need is at least that), and the prediction multiplies the estimate by the larger of the
two and says which.

A precedent beats the ratio: when an earlier attempt of the same strategy finished with an
estimate at least as large and no more free memory than now, and no attempt ran out with an
estimate no larger and at least as much free memory, the same encode repeated (the usual case: a
workflow run again) fits as it did, so its own measured ratio is used without margin. That keeps
an encode that survived close to the limit (the VAE's attention retries in slices when it runs
out) from being tiled the next time because of the margin alone.

The table is per process, bounded in keys and in samples per key, and shared by all chains; a
chain can be given its own (tests, benches that model different VAEs with one object).
"""

from __future__ import annotations

import threading
from collections import OrderedDict, deque
from dataclasses import dataclass

from ..report import format_bytes

SAFETY_MARGIN = 1.2  # headroom over the largest measured ratio: allocator rounding, input-dependent peaks
MAX_SAMPLES_PER_KEY = 8
MAX_KEYS = 32
# Without a measurement, skip a strategy only when even half the VAE's estimate would not fit:
# the estimates are written to be cautious (see above), a direct try that fails costs one attempt
# (what ComfyUI's own encode always pays), and the attempt calibrates every later encode.
UNCALIBRATED_OVERESTIMATE = 2.0

MEASURED, RAN_OUT = "measured", "ran_out"


@dataclass(frozen=True)
class Sample:
    ratio: float  # measured (or, for ran_out, at least needed) bytes / the VAE's estimate
    strategy: str
    kind: str  # measured | ran_out
    estimate_bytes: int | None = None  # the VAE's estimate for what the attempt encoded
    free_bytes: int | None = None  # free memory the attempt was predicted against


@dataclass(frozen=True)
class Calibration:
    """What a prediction multiplies the VAE's estimate by, and where that came from."""

    model: str
    device_type: str
    dtype: str
    ratio: float | None  # the largest measured / estimated ratio; None: no attempt finished
    margin: float
    n_samples: int
    n_ran_out: int
    samples: tuple[Sample, ...] = ()
    # the largest ratio an attempt that ran out of memory proved the need to exceed; None: none ran out
    lower_bound_ratio: float | None = None

    def precedent(self, strategy: str, estimate_bytes: int | None, free_bytes: int | None) -> Sample | None:
        """An earlier finished attempt of `strategy` that this one repeats at worst as easily (see
        the module's docstring), unless an attempt that ran out contradicts it."""
        if estimate_bytes is None or free_bytes is None:
            return None
        same = [s for s in self.samples if s.strategy == strategy and s.estimate_bytes is not None]
        same = [s for s in same if s.free_bytes is not None]
        if any(
            s.kind == RAN_OUT and s.estimate_bytes <= estimate_bytes and s.free_bytes >= free_bytes
            for s in same
        ):
            return None
        fits = [
            s
            for s in same
            if s.kind == MEASURED and s.estimate_bytes >= estimate_bytes and s.free_bytes <= free_bytes
        ]
        return max(fits, key=lambda s: s.ratio) if fits else None

    def precedent_source(self, sample: Sample) -> str:
        return (
            f"a {sample.strategy} encode of {self.model} on {self.device_type} ({self.dtype}) in this process "
            f"finished with an estimate as large ({format_bytes(sample.estimate_bytes)}) and no more free memory "
            f"({format_bytes(sample.free_bytes)}): its measured/estimated {sample.ratio:.3g}, no margin"
        )

    @property
    def factor(self) -> float:
        """What the VAE's estimate is multiplied by: the measured ratio with its margin, raised to the
        lower bound when an attempt that ran out proved the need larger (no margin on a bound)."""
        measured = None if self.ratio is None else self.ratio * self.margin
        return max(v for v in (measured, self.lower_bound_ratio) if v is not None)

    @property
    def source(self) -> str:
        n_measured = self.n_samples - self.n_ran_out
        text = f"calibrated from {self.n_samples} earlier encode attempt{'s' if self.n_samples != 1 else ''} "
        text += f"of {self.model} on {self.device_type} ({self.dtype}) in this process"
        parts = []
        if n_measured:
            parts.append(f"measured/estimated up to {self.ratio:.3g}, x{self.margin:g} margin")
        if self.n_ran_out:
            parts.append(
                f"{self.n_ran_out} ran out of memory: the need is at least {self.lower_bound_ratio:.3g} x the "
                "estimate (a lower bound, not a measurement)"
            )
        return text + ": " + "; ".join(parts)


def _dtype_name(dtype) -> str:
    return str(dtype).replace("torch.", "") if dtype is not None else "unknown dtype"


def calibration_key(vae, device: str | None) -> tuple[str, str, str] | None:
    """(model class, device type, dtype), or None when the device is unknown. ComfyUI's VAE wrapper
    is one class for every family, so the model inside it (`first_stage_model`) names the family."""
    if device is None:
        return None
    model = getattr(vae, "first_stage_model", None)
    name = type(model).__name__ if model is not None else type(vae).__name__
    return (name, str(device).split(":")[0], _dtype_name(getattr(vae, "vae_dtype", None)))


class CalibrationTable:
    """Bounded per-process table: key -> the last MAX_SAMPLES_PER_KEY samples; the least recently
    used key goes first when MAX_KEYS is reached."""

    def __init__(
        self, max_keys: int = MAX_KEYS, max_samples: int = MAX_SAMPLES_PER_KEY, margin: float = SAFETY_MARGIN
    ):
        self.max_keys, self.max_samples, self.margin = max_keys, max_samples, margin
        self._samples: OrderedDict[tuple, deque[Sample]] = OrderedDict()
        self._lock = threading.Lock()

    def record(
        self,
        key: tuple | None,
        ratio: float,
        strategy: str,
        kind: str = MEASURED,
        estimate_bytes: int | None = None,
        free_bytes: int | None = None,
    ) -> bool:
        """Keep one sample; False when there is nothing to learn (no key, no positive ratio)."""
        if key is None or not ratio > 0 or ratio == float("inf"):
            return False
        with self._lock:
            samples = self._samples.pop(key, None) or deque(maxlen=self.max_samples)
            samples.append(Sample(float(ratio), strategy, kind, estimate_bytes, free_bytes))
            self._samples[key] = samples
            while len(self._samples) > self.max_keys:
                self._samples.popitem(last=False)
        return True

    def lookup(self, key: tuple | None) -> Calibration | None:
        if key is None:
            return None
        with self._lock:
            samples = list(self._samples.get(key) or ())
            if samples:
                self._samples.move_to_end(key)
        if not samples:
            return None
        measured = [s.ratio for s in samples if s.kind != RAN_OUT]
        ran_out = [s.ratio for s in samples if s.kind == RAN_OUT]
        return Calibration(
            model=key[0],
            device_type=key[1],
            dtype=key[2],
            ratio=max(measured) if measured else None,
            margin=self.margin,
            n_samples=len(samples),
            n_ran_out=len(ran_out),
            samples=tuple(samples),
            lower_bound_ratio=max(ran_out) if ran_out else None,
        )

    def samples(self, key: tuple) -> list[Sample]:
        with self._lock:
            return list(self._samples.get(key) or ())

    def keys(self) -> list[tuple]:
        with self._lock:
            return list(self._samples)

    def clear(self) -> None:
        with self._lock:
            self._samples.clear()


PROCESS_TABLE = CalibrationTable()
