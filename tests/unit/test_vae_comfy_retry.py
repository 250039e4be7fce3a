"""ComfyUI's own tiled retry inside a direct encode is an out of memory: counted, named, never a
measurement, and no finding says the estimate was cautious (fakes shaped like ComfyUI's VAE.encode)."""

from __future__ import annotations

import logging

import pytest
import torch

from monitors.exporters.prometheus import VAE_N_OOM, VAE_USED
from monitors.probes.fake import GiB, fake_probes
from monitors.vae.calibration import MEASURED, RAN_OUT, CalibrationTable
from monitors.vae.chain import run_chain
from monitors.vae.comfy_retry import COMFY_RETRY_TILERS, RETRY_STRATEGY
from monitors.vae.outcomes import OK, OOM, ChainOptions
from monitors.vae.report import build_step
from tests.unit.test_vae_chain import COMFY_RETRY_WARNING, CUDA_OOM, FakeMemory, FakeVAE, outcomes, pixels

MiB = 1024**2
WATCHED = ("Ran out of memory when regular VAE encoding",)
# Findings that must never stand beside each other in one step.
CONTRADICTIONS = (
    ("estimate_pessimistic", "comfy_internal_tiled_retry"),
    ("estimate_pessimistic", "direct_out_of_memory"),
)


class ComfyLikeVAE(FakeVAE):
    """Encodes as ComfyUI's VAE.encode does: a direct try that may run out of memory, caught, a
    warning logged, then its own tiler (`encode_tiled_`). `direct_oom` / `retry_oom`: raise there."""

    def __init__(self, probes=None, direct_oom=True, retry_oom=False, log_warning=True, **kwargs):
        super().__init__(**kwargs)
        self.probes, self.direct_oom, self.retry_oom, self.log_warning = (
            probes,
            direct_oom,
            retry_oom,
            log_warning,
        )

    def encode(self, pixels):
        do_tile = False
        try:
            if self.probes is not None:
                self.probes.torch.allocate(0, 3 * GiB)  # reaches the cap
                self.probes.torch.devices[0]["allocated_bytes"] -= 3 * GiB
            if self.direct_oom:
                raise CUDA_OOM("CUDA out of memory. Tried to allocate 14.00 GiB")
            out = self._latent(pixels)
        except CUDA_OOM:
            if self.log_warning:
                logging.warning(COMFY_RETRY_WARNING)
            do_tile = True
        if do_tile:
            out = self.encode_tiled_(pixels)
        return out

    def encode_tiled_(self, pixels, tile_x=512, tile_y=512, overlap=64):
        self.calls.append("comfy tiled")
        if self.retry_oom:
            raise CUDA_OOM("CUDA out of memory (the retry too)")
        return self._latent(pixels)


def chain(vae, free=4 * GiB, table=None, strategy="auto", probes=None, **kwargs):
    memory = FakeMemory(free=free)
    kwargs.setdefault("retry_tilers", COMFY_RETRY_TILERS)
    options = ChainOptions(
        strategy=strategy,
        free_memory=memory.read,
        cleanup=memory.cleanup,
        probes=probes or fake_probes("1 GPU"),
        calibration=table if table is not None else CalibrationTable(),
        watch_log_messages=WATCHED,
        **kwargs,
    )
    return run_chain(vae, pixels(1, 256, 256), options)


def codes(step):
    return {f.code for f in step.findings}


def no_contradiction(step):
    found = codes(step)
    return not any(a in found and b in found for a, b in CONTRADICTIONS)


def test_a_caught_out_of_memory_is_counted_and_the_retry_is_the_strategy_used():
    result = chain(ComfyLikeVAE())
    assert outcomes(result) == [("direct", OOM), (RETRY_STRATEGY, OK)]
    assert result.strategy_used == "tiled (ComfyUI retry)" and result.samples is not None
    direct, retry = result.attempts
    assert direct.caught_by_comfyui and "caught this out-of-memory" in direct.reason
    assert direct.notes == (COMFY_RETRY_WARNING,) and retry.duration_s is not None  # the tiler call was seen
    step = build_step("5", result)
    assert step.summary[VAE_N_OOM] == 1 and step.summary[VAE_USED] == RETRY_STRATEGY
    assert step.summary["n_attempts"] == 2
    assert [(a["strategy"], a["outcome"]) for a in step.details["attempts"]] == outcomes(result)
    assert "comfy_internal_tiled_retry" in codes(step) and no_contradiction(step)
    assert "direct_out_of_memory" not in codes(step)  # one finding for one event


def test_the_tiler_call_is_seen_where_the_log_hides_warnings():
    vae = ComfyLikeVAE(log_warning=False)  # as with a log level above WARNING
    result = chain(vae)
    assert outcomes(result) == [("direct", OOM), (RETRY_STRATEGY, OK)]
    assert result.attempts[0].notes == () and result.attempts[1].duration_s is not None
    assert "encode_tiled_" not in vars(vae)  # the wrapper is gone, the class method is back
    assert vae.calls == ["comfy tiled"]


def test_only_the_log_warning_is_enough_and_the_retry_time_is_then_unknown():
    result = chain(ComfyLikeVAE(), retry_tilers=())
    assert outcomes(result) == [("direct", OOM), (RETRY_STRATEGY, OK)]
    assert result.attempts[1].duration_s is None and "unknown when only the log" in result.attempts[1].reason


def test_no_retry_is_one_direct_row_and_leaves_the_vae_as_it_was():
    vae = ComfyLikeVAE(direct_oom=False)
    own = object()
    vae.encode_tiled_1d = own  # an instance attribute of the same name is put back as it was
    result = chain(vae)
    assert outcomes(result) == [("direct", OK)] and result.strategy_used == "direct"
    assert not result.attempts[0].caught_by_comfyui
    assert "encode_tiled_" not in vars(vae) and vae.encode_tiled_1d is own


def test_a_retry_that_runs_out_too_counts_twice_and_our_tiled_strategy_follows():
    result = chain(ComfyLikeVAE(retry_oom=True))
    assert outcomes(result) == [("direct", OOM), (RETRY_STRATEGY, OOM), ("tiled", OK)]
    assert result.attempts[1].error_type == "OutOfMemoryError"
    step = build_step("5", result)
    assert step.summary["n_out_of_memory"] == 2 and step.summary["strategy_used"] == "tiled"


def test_a_caught_out_of_memory_teaches_a_lower_bound_never_a_measured_ratio():
    probes, table = fake_probes("1 GPU"), CalibrationTable()
    vae = ComfyLikeVAE(probes=probes, bytes_per_pixel=200_000, size=0)  # 12.2 GiB estimated
    first = chain(vae, free=3 * GiB, table=table, strategy="direct", probes=probes)
    assert outcomes(first) == [("direct", OOM), (RETRY_STRATEGY, OK)]
    (sample,) = table.samples(("ComfyLikeVAE", "cuda", "float32"))
    assert sample.kind == RAN_OUT and sample.kind != MEASURED
    assert sample.ratio == pytest.approx(3 * GiB / (200_000 * 256 * 256))  # need > the 3 GiB it had
    # Asked for direct again: it runs out again; no finding calls the estimate cautious.
    again = chain(vae, free=3 * GiB, table=table, strategy="direct", probes=probes)
    prediction = again.predictions["direct"]
    assert prediction.calibration_ratio is None and prediction.fits is False
    assert "a lower bound, not a measurement" in prediction.calibration_source
    step = build_step("5", again)
    assert "estimate_pessimistic" not in codes(step) and no_contradiction(step)
    assert step.summary["direct_prediction_held"] is True  # predicted not to fit, and it did not


def test_auto_after_a_caught_out_of_memory_goes_straight_to_tiled():
    probes, table = fake_probes("1 GPU"), CalibrationTable()
    vae = ComfyLikeVAE(probes=probes, bytes_per_pixel=200_000)
    chain(vae, free=3 * GiB, table=table, probes=probes)
    again = chain(vae, free=3 * GiB, table=table, probes=probes)
    assert outcomes(again)[:2] == [("direct", "skipped"), ("tiled", OK)]


def test_the_cpu_strategy_is_never_split():
    result = chain(FakeVAE(fail={"direct": CUDA_OOM("x"), "tiled": CUDA_OOM("x")}), cpu_encode=cpu_logging)
    assert [a.strategy for a in result.attempts] == ["direct", "tiled", "cpu"]
    assert result.strategy_used == "cpu" and result.attempts[-1].notes == (COMFY_RETRY_WARNING,)


def cpu_logging(vae, pixels):
    logging.warning(COMFY_RETRY_WARNING)
    return torch.ones(1, 4, 32, 32)


def _comfy_vae_encode(root):
    import ast

    tree = ast.parse((root / "comfy" / "sd.py").read_text(encoding="utf-8"))
    vae = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "VAE")
    return next(n for n in vae.body if isinstance(n, ast.FunctionDef) and n.name == "encode")


def test_every_tiler_comfyuis_encode_retries_with_is_watched():
    """Contract with each ComfyUI snapshot (sources parsed, nothing imported): the tiled methods
    VAE.encode calls after catching an out-of-memory are all in COMFY_RETRY_TILERS, and its warning
    is the text the node watches for."""
    import ast

    from tests.unit.test_comfyui_symbols import ROOTS

    if not ROOTS:
        pytest.skip("no ComfyUI snapshot beside the checkout (see tests/unit/test_comfyui_symbols.py)")
    for version, root in ROOTS.items():
        encode = _comfy_vae_encode(root)
        called = {
            n.func.attr
            for n in ast.walk(encode)
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and "tiled" in n.func.attr
        }
        assert called and called <= set(COMFY_RETRY_TILERS), (version, called)
        assert WATCHED[0] in ast.get_source_segment((root / "comfy" / "sd.py").read_text(), encode), version


# -- the watch itself --------------------------------------------------------------------------


def test_the_log_watch_keeps_at_most_ten_matching_lines_each_cut_at_300_characters():
    from monitors.vae.comfy_retry import MAX_NOTES, LogWatch

    assert MAX_NOTES == 10
    watch = LogWatch(("retrying with tiled",))
    record = lambda message: logging.LogRecord("comfy", logging.WARNING, __file__, 1, message, None, None)  # noqa: E731
    watch.emit(record("something else entirely"))
    assert watch.seen == [], "only lines with a watched text"
    for i in range(12):
        watch.emit(record(f"retrying with tiled {i} " + "x" * 400))
    assert len(watch.seen) == 10
    assert watch.seen[0].startswith("retrying with tiled 0 ") and len(watch.seen[0]) == 300
    assert watch.seen[-1].startswith("retrying with tiled 9 ")


def test_the_retry_watch_is_its_own_context_and_removes_its_log_handler():
    from monitors.vae.comfy_retry import RetryWatch

    class Vae:
        def encode_tiled_(self, x):
            return x

    vae = Vae()
    before = list(logging.getLogger().handlers)
    with RetryWatch(vae, log_texts=("retrying with tiled",), tilers=("encode_tiled_",)) as watch:
        assert isinstance(watch, RetryWatch)
        assert len(logging.getLogger().handlers) == len(before) + 1
        logging.getLogger("comfy").warning("Warning: Ran out of memory ..., retrying with tiled VAE encoding.")
        assert vae.encode_tiled_(3) == 3
    assert logging.getLogger().handlers == before
    assert watch.retried and watch.tiler_called == "encode_tiled_" and len(watch.notes) == 1
    assert "encode_tiled_" not in vae.__dict__, "the class's tiler is back"
    quiet = RetryWatch(vae)
    with quiet:
        pass
    assert quiet.notes == () and not quiet.retried
