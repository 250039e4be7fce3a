"""monitors.pipeline_profiler.display: the real-time line, word for word, with and without totals."""

from monitors.pipeline_profiler.display import display_line, gpu_text, used_of_total
from monitors.probes.readings import GpuReading, Snapshot

GiB = 1024**3


def test_used_of_total_computes_the_percent_unless_given():
    assert used_of_total(GiB, 4 * GiB) == "1.0 GiB / 4.0 GiB (25.0 %)"
    assert used_of_total(GiB, 4 * GiB, 30.0) == "1.0 GiB / 4.0 GiB (30.0 %)"
    assert used_of_total(GiB, None) == "1.0 GiB" and used_of_total(GiB, 0) == "1.0 GiB"
    assert used_of_total(None, 4 * GiB) == "n/a"
    assert used_of_total(0, 4 * GiB) == "0 B / 4.0 GiB (0.0 %)"


def test_gpu_text_without_nvml_shows_the_allocator_figure_only():
    assert gpu_text(GpuReading(index=1, allocated_bytes=2 * GiB)) == "cuda:1 allocated 2.0 GiB"
    assert gpu_text(GpuReading(index=0)) == "cuda:0 allocated n/a"
    zero = GpuReading(index=0, nvml_used_bytes=0, utilization_pct=0.0, temperature_c=0.0, power_w=0.0)
    assert gpu_text(zero) == "cuda:0 0 B util 0 % 0 °C 0 W"  # zero is a reading, not unknown


def test_display_line_word_for_word():
    snapshot = Snapshot(
        monotonic_s=0.0,
        unix_time_s=0.0,
        process_rss_bytes=512 * 1024**2,
        ram_used_bytes=GiB,
        ram_total_bytes=8 * GiB,
        cpu_pct=49.6,
        gpus=(
            GpuReading(index=0, allocated_bytes=GiB),
            GpuReading(index=1, nvml_used_bytes=GiB, nvml_total_bytes=2 * GiB),
        ),
    )
    assert display_line("t2v", 3.25, "vae", snapshot) == (
        "pipeline monitor [t2v] 3.2 s: stage vae, RSS 512.0 MiB, CPU 50 %, RAM 1.0 GiB / 8.0 GiB (12.5 %), "
        "cuda:0 allocated 1.0 GiB, cuda:1 1.0 GiB / 2.0 GiB (50.0 %)"
    )
    bare = Snapshot(monotonic_s=0.0, unix_time_s=0.0)
    assert (
        display_line("x", 0.0, None, bare) == "pipeline monitor [x] 0.0 s: stage -, RSS n/a, CPU n/a, RAM n/a"
    )
