"""Free memory as this process can use it: the per-process memory fraction, ComfyUI's reserve and
unloadable models, which memory manager was read, and a before/after figure the encode moves."""

from __future__ import annotations

import pytest
import torch

from monitors.probes.fake import GiB, fake_probes
from monitors.vae.calibration import CalibrationTable
from monitors.vae.chain import run_chain
from monitors.vae.free_memory import DYNAMIC, ESTIMATE_BASED, FreeMemory, as_free_memory, usable_gpu_free
from monitors.vae.outcomes import OK, SKIPPED, ChainOptions, read_free_memory
from monitors.vae.report import build_step
from tests.unit.test_vae_chain import FakeMemory, FakeVAE, outcomes, pixels

MiB = 1024**2


def capped(fraction, total=140 * GiB):
    return {"fraction": fraction, "total_bytes": total, "limit_bytes": int(total * fraction)}


def test_the_per_process_cap_decides_when_it_leaves_less_than_the_device():
    reading = usable_gpu_free(138 * GiB, ESTIMATE_BASED, 0, 0, capped(3 / 140), allocated_bytes=GiB)
    assert reading.free_bytes == 2 * GiB and reading.capped_by_process_limit is True
    assert reading.process_limit_bytes == 3 * GiB and reading.manager == ESTIMATE_BASED
    assert "per-process memory fraction 0.0214 caps this process at 3.0 GiB" in reading.source
    assert "(the cap decides)" in reading.source


def test_unloadable_models_count_on_both_sides_and_the_reserve_on_the_device_side():
    reading = usable_gpu_free(GiB, DYNAMIC, 2 * GiB, 512 * MiB, capped(0.5, 8 * GiB), 3 * GiB)
    # device: 1 + 2 - 0.5 = 2.5 GiB; process: 4 - 3 + 2 = 3 GiB
    assert reading.free_bytes == 2560 * MiB and not reading.capped_by_process_limit
    assert reading.manager == DYNAMIC and "dynamic memory manager" in reading.source


@pytest.mark.parametrize(
    "limit, allocated, why",
    [
        (capped(1.0), 0, "no per-process memory fraction set"),
        (None, 0, "per-process memory fraction unknown"),
        (capped(0.1), None, "per-process memory fraction unknown"),
    ],
)
def test_without_a_known_cap_the_device_side_stands_and_says_why(limit, allocated, why):
    reading = usable_gpu_free(10 * GiB, ESTIMATE_BASED, 0, GiB, limit, allocated)
    assert reading.free_bytes == 9 * GiB and reading.source.endswith(why)
    assert reading.process_limit_bytes is None and not reading.capped_by_process_limit


def test_a_reserve_larger_than_what_there_is_gives_nothing_never_a_negative():
    assert usable_gpu_free(GiB, ESTIMATE_BASED, 0, 2 * GiB).free_bytes == 0
    assert usable_gpu_free(GiB, ESTIMATE_BASED, 0, 0, capped(0.01, 10 * GiB), 5 * GiB).free_bytes == 0


def test_plain_bytes_and_none_are_readings_too():
    assert as_free_memory(5) == FreeMemory(5) and as_free_memory(None).free_bytes is None
    reading = FreeMemory(1, DYNAMIC)
    assert as_free_memory(reading) is reading


def test_auto_under_a_cap_tiles_at_once_and_the_step_says_which_manager_it_read():
    """The GPU run: a 3 GiB cap on a 140 GiB device; 14 GiB estimated for direct."""
    probes = fake_probes("1 GPU")
    probes.torch.total_bytes[0], probes.torch.memory_fractions[0] = 140 * GiB, 3 / 140

    def read(device):
        limit = probes.gpu_process_limit(0)
        allocated = probes.torch_memory(0)["allocated_bytes"]
        return usable_gpu_free(138 * GiB, ESTIMATE_BASED, 0, 0, limit, allocated)

    vae = FakeVAE(bytes_per_pixel=14 * GiB // (256 * 256), size=0)
    options = ChainOptions(free_memory=read, probes=probes, calibration=CalibrationTable())
    result = run_chain(vae, pixels(1, 256, 256), options)
    direct = result.predictions["direct"]
    assert direct.free_bytes == 3 * GiB and direct.fits is False
    assert direct.free_memory_manager == ESTIMATE_BASED and "(the cap decides)" in direct.free_memory_source
    assert outcomes(result) == [("direct", SKIPPED), ("tiled", OK)]
    summary = build_step("3", result).summary
    assert summary["direct_free_bytes"] == 3 * GiB and summary["free_memory_manager"] == ESTIMATE_BASED
    assert summary["free_memory_before_bytes"] == 3 * GiB


def test_a_reader_of_plain_bytes_reads_no_manager():
    result = run_chain(
        FakeVAE(), pixels(), ChainOptions(free_memory=FakeMemory().read, probes=fake_probes("1 GPU"))
    )
    assert result.predictions["direct"].free_memory_manager is None
    assert build_step("3", result).summary["free_memory_manager"] is None


def test_the_driver_free_figure_moves_with_the_encodes_own_reserved_memory():
    """ComfyUI's free memory counts cached blocks as free: an encode that leaves 384 MiB reserved
    does not move it. The driver's free memory does."""
    probes = fake_probes("1 GPU")

    class CachingVAE(FakeVAE):
        def encode(self, pixels):
            probes.torch.allocate(0, 384 * MiB)
            probes.torch.devices[0]["allocated_bytes"] -= 384 * MiB  # freed into the cache
            probes.nvml.devices[0]["used_bytes"] += 384 * MiB  # the driver sees it held
            return super().encode(pixels)

    memory = FakeMemory(free=8 * GiB)
    result = run_chain(CachingVAE(), pixels(), ChainOptions(free_memory=memory.read, probes=probes))
    summary = build_step("3", result).summary
    assert summary["free_memory_change_bytes"] == 0
    assert summary["gpu_driver_free_before_bytes"] == 23 * GiB
    assert summary["gpu_driver_free_change_bytes"] == -384 * MiB
    assert summary["gpu_reserved_change_bytes"] == 384 * MiB


def test_the_driver_free_figure_is_unknown_without_nvml_and_on_the_cpu():
    result = run_chain(
        FakeVAE(), pixels(), ChainOptions(free_memory=FakeMemory().read, probes=fake_probes("NVML missing"))
    )
    summary = build_step("3", result).summary
    assert summary["gpu_driver_free_before_bytes"] is None and summary["gpu_driver_free_change_bytes"] is None
    cpu = run_chain(
        FakeVAE(device="cpu"),
        pixels(),
        ChainOptions(free_memory=FakeMemory().read, probes=fake_probes("1 GPU")),
    )
    assert build_step("3", cpu).summary["gpu_driver_free_after_bytes"] is None


def test_the_default_reader_honours_the_process_fraction(monkeypatch):
    """torch.cuda.mem_get_info ignores set_per_process_memory_fraction; the reader does not."""
    probes = fake_probes("1 GPU")
    probes.torch.total_bytes[0], probes.torch.memory_fractions[0] = 140 * GiB, 3 / 140
    probes.torch.allocate(0, GiB)
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda index: (138 * GiB, 140 * GiB))
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda index: GiB)
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda index: GiB + 256 * MiB)
    reading = read_free_memory("cuda:0", probes=probes)
    assert reading.free_bytes == 2 * GiB and reading.capped_by_process_limit and reading.manager is None
    probes.torch.memory_fractions[0] = 1.0
    assert read_free_memory("cuda:0", probes=probes).free_bytes == 138 * GiB + 256 * MiB


def test_the_process_limit_probe_is_none_with_a_reason_when_torch_cannot_say():
    probes = fake_probes("1 GPU")
    probes.torch.fail.add("process_limit")
    assert probes.gpu_process_limit(0) is None
    assert "fake failure in process_limit" in probes.failures()["torch.process_limit"]


def test_a_cap_that_leaves_exactly_the_device_side_does_not_decide():
    reading = usable_gpu_free(2 * GiB, ESTIMATE_BASED, 0, 0, capped(0.5, 6 * GiB), allocated_bytes=GiB)
    assert reading.free_bytes == 2 * GiB and reading.process_limit_bytes == 3 * GiB
    assert reading.capped_by_process_limit is False and "(the cap decides)" not in reading.source
    assert (
        usable_gpu_free(2 * GiB - 1, ESTIMATE_BASED, 0, 0, capped(0.5, 6 * GiB), GiB).free_bytes
        == 2 * GiB - 1
    )


def test_a_reading_is_frozen():
    reading = FreeMemory(1, DYNAMIC)
    with pytest.raises(AttributeError):
        reading.free_bytes = 2
