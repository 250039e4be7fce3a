"""Chained spans (ComfyUI's nodes, monitors/engine/span.py): one high-water-mark read per span, no peak lost."""

from __future__ import annotations

from monitors.engine.span import METHOD_KERNEL_HWM, METHOD_SAMPLED, Span, open_span_count
from monitors.probes.fake import GiB, fake_probes


def counting(probes):
    """Count the probes' high-water-mark reads and resets."""
    counts = {"read": 0, "reset": 0}
    read, reset = probes.host.peak_rss_bytes, probes.host.reset_peak_rss

    def counted_read():
        counts["read"] += 1
        return read()

    def counted_reset():
        counts["reset"] += 1
        return reset()

    probes.host.peak_rss_bytes, probes.host.reset_peak_rss = counted_read, counted_reset
    return counts


def test_a_chained_span_after_another_reads_the_mark_once_and_resets_only_at_its_stop():
    probes = fake_probes("no GPU")
    prompt = Span("prompt", probes=probes).start()
    Span("node 1", probes=probes, chained=True).start().stop()  # starts as a plain span
    counts = counting(probes)
    Span("node 2", probes=probes, chained=True).start().stop()
    assert counts == {"read": 1, "reset": 1}
    prompt.stop()


def test_chained_peaks_count_from_the_previous_stop_and_every_peak_reaches_the_prompt():
    probes = fake_probes("1 GPU")
    prompt = Span("prompt", probes=probes).start()
    first = Span("node 1", probes=probes, chained=True).start()
    probes.host.set_rss(3 * GiB)
    probes.torch.allocate(0, 2 * GiB)
    probes.host.set_rss(1 * GiB)
    probes.torch.allocate(0, -2 * GiB)
    first_result = first.stop()
    probes.host.set_rss(int(1.5 * GiB))  # between the nodes: ComfyUI gathering node 2's inputs
    probes.host.set_rss(1 * GiB)
    second = Span("node 2", probes=probes, chained=True).start()
    probes.host.set_rss(int(1.2 * GiB))
    probes.torch.allocate(0, 1 * GiB)
    second_result = second.stop()
    prompt_result = prompt.stop()
    assert first_result.peak_rss_bytes == 3 * GiB
    assert first_result.peak("cuda:0.allocated_bytes") == 2 * GiB
    # node 2's counters were reset at node 1's stop, not its own start: it carries the moments between
    assert second_result.peak_rss_bytes == int(1.5 * GiB)
    assert second_result.peak("cuda:0.allocated_bytes") == 1 * GiB
    assert second_result.peak_rss_method == METHOD_KERNEL_HWM
    assert prompt_result.peak_rss_bytes == 3 * GiB
    assert prompt_result.peak("cuda:0.allocated_bytes") == 2 * GiB
    assert open_span_count() == 0


def test_a_plain_span_between_chained_ones_breaks_the_chain():
    probes = fake_probes("no GPU")
    Span("node 1", probes=probes, chained=True).start().stop()
    with Span("a step's own span", probes=probes):
        probes.host.set_rss(4 * GiB)  # the step's peak is not the next node's
        probes.host.set_rss(1 * GiB)
    counts = counting(probes)
    node = Span("node 2", probes=probes, chained=True).start()
    assert counts["reset"] == 1  # reset at its start, as a plain span
    assert node.stop().peak_rss_bytes == 1 * GiB


def test_a_span_inside_a_chained_one_hands_its_peak_over_and_the_next_node_starts_afresh():
    probes = fake_probes("no GPU")
    Span("node 1", probes=probes, chained=True).start().stop()
    node = Span("monitor node", probes=probes, chained=True).start()
    probes.host.set_rss(2 * GiB)
    with Span("its step", probes=probes) as step:
        probes.host.set_rss(5 * GiB)
        probes.host.set_rss(1 * GiB)
    node_result = node.stop()
    assert step.result.peak_rss_bytes == 5 * GiB and node_result.peak_rss_bytes == 5 * GiB
    after = Span("node 3", probes=probes, chained=True).start().stop()
    assert after.peak_rss_bytes == 1 * GiB


def test_the_chain_is_kept_per_probes_and_per_device_count():
    one, other = fake_probes("no GPU"), fake_probes("no GPU")
    Span("node 1", probes=one, chained=True).start().stop()
    counts = counting(other)
    Span("node 2", probes=other, chained=True).start().stop()
    assert counts == {"read": 1, "reset": 2}  # another process's counters: reset at its start too
    gpu = fake_probes("1 GPU")
    Span("node 3", probes=gpu, chained=True).start().stop()
    gpu.torch.devices.append(dict(gpu.torch.devices[0]))  # CUDA came up on a second device meanwhile
    resets = []
    gpu.torch.reset_peak = lambda index: resets.append(index) or True
    Span("node 4", probes=gpu, chained=True).start().stop()
    assert resets[:2] == [0, 1]  # both devices reset at its start, not only at its stop


def test_a_refused_reset_at_a_chained_stop_leaves_the_next_span_sampled():
    probes = fake_probes("no GPU")
    Span("node 1", probes=probes, chained=True).start().stop()
    probes.host.hwm_allowed = False
    Span("node 2", probes=probes, chained=True).start().stop()  # its stop's reset is refused
    assert Span("node 3", probes=probes, chained=True).start().stop().peak_rss_method == METHOD_SAMPLED


def test_a_chained_span_inside_a_span_started_after_the_chain_counts_only_its_own_peaks():
    probes = fake_probes("no GPU")
    Span("node 1", probes=probes, chained=True).start().stop()
    outer = Span("a step around the next node", probes=probes).start()
    probes.host.set_rss(4 * GiB)  # the outer span's own peak, before the node starts
    probes.host.set_rss(1 * GiB)
    counts = counting(probes)
    node = Span("node 2", probes=probes, chained=True).start()
    assert counts["reset"] == 1  # the outer span's start broke the chain
    assert node.stop().peak_rss_bytes == 1 * GiB
    assert outer.stop().peak_rss_bytes == 4 * GiB
