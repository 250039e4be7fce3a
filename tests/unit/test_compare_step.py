"""The `tensor_compare` step off the prompt's path (monitors/dumps/compare_step.py): the node takes
copies of the live values and returns a pending step; the dump writer's thread compares after the
dumps handed to it before; where it cannot, the comparison runs in the prompt and says why."""

from __future__ import annotations

import threading
import time

import torch

from monitors.dumps import compare_step
from monitors.dumps.collect import collect_tensors
from monitors.dumps.compare_step import finish_compare_step, start_compare_step
from monitors.dumps.files import plan_dump
from monitors.dumps.report import INLINE_WRITER, LIVE_VALUE, build_compare_step, build_dump_step
from monitors.dumps.writer import DumpWriter
from tests.readbacks import ReadbackCounter
from tests.unit.test_dump_writer import FakeDevice

WATCHDOG_S = 60  # a hang guard, not a speed limit


def dump(directory, name, **values):
    return build_dump_step("9", None, values, name, False, directory=str(directory))


def start(directory, writer, dump_a="a", dump_b=LIVE_VALUE, **values):
    return start_compare_step("10", dump_a, dump_b, 1e-5, 1e-8, values, directory=str(directory), writer=writer)


def busy(writer) -> threading.Event:
    """The writer's thread held until the returned gate is set."""
    gate = threading.Event()
    writer._worker.submit(lambda: gate.wait(WATCHDOG_S))
    return gate


def test_the_node_returns_a_pending_step_and_the_writer_compares_the_values_as_they_were(tmp_path):
    samples = torch.randn(2, 4, 8, 8)
    dump(tmp_path, "a", latent={"samples": samples.clone()})
    writer = DumpWriter(max_bytes=1 << 20)
    gate = busy(writer)
    pending, ticket = start(tmp_path, writer, latent={"samples": samples})
    assert pending.pending and ticket is not None and ticket.outcome is None
    assert pending.summary == {"dump_a": "a", "dump_b": LIVE_VALUE, "rtol": 1e-5, "atol": 1e-8}
    work = pending.details["work"]
    assert (work["state"], work["background"], work["in_prompt_s"] >= 0) == ("pending", True, True)
    samples.zero_()  # in place, after the node returned, before the comparison ran
    gate.set()
    finished = finish_compare_step(pending, ticket.wait(WATCHDOG_S))
    assert not finished.pending and finished.summary["status"] == "identical"
    work = finished.details["work"]
    assert (work["state"], work["background"], work["in_prompt_s"]) == ("done", True, pending.details["work"]["in_prompt_s"])
    assert finished.created_unix_s == pending.created_unix_s
    assert work["finished_unix_s"] >= pending.created_unix_s  # one clock: it finished after it began
    assert writer.in_flight_bytes == 0  # the copies' bytes are given back


def test_the_figures_are_those_of_the_comparison_in_the_prompt(tmp_path):
    reference = torch.randn(3, 16, 16)
    dump(tmp_path, "a", image=reference)
    live = {"image": reference + 1e-3 * torch.randn(3, 16, 16)}
    writer = DumpWriter(max_bytes=1 << 20)
    pending, ticket = start(tmp_path, writer, **live)
    finished = finish_compare_step(pending, ticket.wait(WATCHDOG_S))
    in_prompt = build_compare_step("10", "a", LIVE_VALUE, 1e-5, 1e-8, live, directory=str(tmp_path))
    assert finished.summary == in_prompt.summary and finished.findings == in_prompt.findings
    assert {k: v for k, v in finished.details.items() if k != "work"} == in_prompt.details


def test_a_dump_handed_to_the_writer_before_is_written_when_the_comparison_reads_it(tmp_path):
    samples = torch.randn(1, 4, 8, 8)
    writer = DumpWriter(max_bytes=1 << 20)
    gate = busy(writer)
    collected = collect_tensors(latent={"samples": samples})
    dump_ticket = writer.write(plan_dump(str(tmp_path), "a", collected, False), collected, {})
    pending, ticket = start(tmp_path, writer, latent={"samples": samples})
    assert not (tmp_path / "a.safetensors").exists()  # neither has run yet
    gate.set()
    finished = finish_compare_step(pending, ticket.wait(WATCHDOG_S))
    assert dump_ticket.outcome.result is not None and finished.summary["status"] == "identical"


class Clock:
    """compare_step's clock: each perf_counter reading half a second after the last."""

    def __init__(self):
        self.now = 100.0

    def perf_counter(self):
        self.now += 0.5
        return self.now

    time = staticmethod(time.time)


def test_above_the_cap_or_without_the_writer_it_compares_in_the_prompt_and_says_why(tmp_path, monkeypatch):
    dump(tmp_path, "a", latent={"samples": torch.ones(4)})
    monkeypatch.setattr(compare_step, "time", Clock())
    for writer, says in ((DumpWriter(max_bytes=0), "every dump is written in the prompt"), (INLINE_WRITER, "off")):
        step, ticket = start(tmp_path, writer, latent={"samples": torch.ones(4)})
        assert ticket is None and not step.pending and step.summary["status"] == "identical"
        assert (step.summary["rtol"], step.summary["atol"]) == (1e-5, 1e-8)
        work = step.details["work"]
        assert (work["state"], work["background"]) == ("done", False) and says in work["reason"]
        assert work["in_prompt_s"] == 0.5  # from the node's start to the comparison's end


def test_the_pending_steps_time_in_the_prompt_is_the_nodes_own(tmp_path, monkeypatch):
    dump(tmp_path, "a", latent={"samples": torch.ones(4)})
    monkeypatch.setattr(compare_step, "time", Clock())
    pending, ticket = start(tmp_path, DumpWriter(max_bytes=1 << 20), latent={"samples": torch.ones(4)})
    assert pending.details["work"]["in_prompt_s"] == 0.5
    assert finish_compare_step(pending, ticket.wait(WATCHDOG_S)).details["work"]["in_prompt_s"] == 0.5


def test_dump_b_naming_a_dump_copies_nothing_and_still_says_the_live_input_is_ignored(tmp_path):
    dump(tmp_path, "a", latent={"samples": torch.ones(4)})
    dump(tmp_path, "b", latent={"samples": torch.ones(4)})
    writer = DumpWriter(max_bytes=1 << 20)
    gate = busy(writer)
    pending, ticket = start(tmp_path, writer, dump_b="b", image=torch.zeros(64))
    assert writer.in_flight_bytes == 0  # the live value is not compared: not copied
    gate.set()
    finished = finish_compare_step(pending, ticket.wait(WATCHDOG_S))
    assert [f.code for f in finished.findings] == ["live_ignored", "identical"]


def test_a_comparison_that_fails_on_the_writer_is_a_failed_step_and_a_lost_one_unfinished(tmp_path, monkeypatch):
    dump(tmp_path, "a", latent={"samples": torch.ones(4)})

    def broken(*args, **kwargs):
        raise RuntimeError("compare broke")

    monkeypatch.setattr(compare_step, "build_compare_step", broken)
    pending, ticket = start(tmp_path, DumpWriter(max_bytes=1 << 20), latent={"samples": torch.ones(4)})
    failed = finish_compare_step(pending, ticket.wait(WATCHDOG_S))
    assert (failed.kind, failed.node_id) == ("tensor_compare", "10")
    assert failed.monitor_errors == ("RuntimeError: compare broke",) and "traceback" in failed.details
    assert failed.details["work"]["state"] == "done" and not failed.pending
    lost = finish_compare_step(pending, None)
    assert not lost.pending and "writer" in lost.unfinished_reason


def test_the_node_reads_nothing_back_from_the_device(tmp_path):
    dump(tmp_path, "a", latent={"samples": torch.ones(2, 4, 8, 8)})
    device = FakeDevice()
    writer = DumpWriter(copier=device, max_bytes=1 << 20)
    with ReadbackCounter() as counter:
        pending, ticket = start(tmp_path, writer, latent={"samples": torch.ones(2, 4, 8, 8)})
    assert counter.n_readbacks == 0 and pending.pending
    device.release()
    assert finish_compare_step(pending, ticket.wait(WATCHDOG_S)).summary["status"] == "identical"
