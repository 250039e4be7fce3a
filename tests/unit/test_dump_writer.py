"""Dumps without a stall (issue 35, monitors/dumps/writer.py, host_copies.py): with a fake device
(a stream that runs its queue only when the test lets it, events, pinned memory), the order is
proved: the copy is enqueued, the node returns, the writer waits for the event, and the file holds
the input as it was even when a later kernel on the same stream changes it in place. On the CPU a
plain copy is taken before the node returns. The cap on bytes in flight writes a dump in the
prompt and says so; the dump path reads nothing back; the recorder takes the finished step."""

from __future__ import annotations

import threading

import pytest
import torch
from safetensors.torch import load_file

from monitors.dumps.collect import collect_tensors
from monitors.dumps.report import build_dump_step, start_dump_step
from monitors.dumps.write_step import finish_dump_step
from monitors.dumps.writer import ENV_MAX_IN_FLIGHT, DumpWriter
from monitors.engine.recorder import RunRecorder
from monitors.engine.store import RunStore
from monitors.numeric.describe import describe_tensor_bounded
from monitors.probes.fake import fake_probes
from tests.readbacks import ReadbackCounter

WATCHDOG_S = 60  # a hang guard, not a speed limit


class FakeDevice:
    """One fake stream: copies and kernels queue up and run, in order, only when the test calls
    `run_until(event)` or the writer waits for an event after the test `release()`d the device."""

    def __init__(self):
        self.log: list[str] = []
        self.queue: list = []  # ("op", fn) and ("event", token)
        self.done: set[int] = set()
        self.released = threading.Event()
        self.lock = threading.Lock()

    # the backend's methods (monitors/probes/device_copy.py)
    def handles(self, tensor) -> bool:
        return True

    def pinned_copy(self, tensor):
        host = torch.empty(tuple(tensor.shape), dtype=tensor.dtype)
        self.log.append("copy enqueued")
        self.enqueue(lambda: host.copy_(tensor))
        return host

    def record_event(self, device):
        token = len(self.queue)
        with self.lock:
            self.queue.append(("event", token))
        self.log.append("event recorded")
        return token

    def wait(self, event) -> None:
        self.log.append("writer waits for the event")
        assert self.released.wait(WATCHDOG_S)
        self.run_until(event)
        self.log.append("event complete")

    # the test's side
    def enqueue(self, fn) -> None:
        with self.lock:
            self.queue.append(("op", fn))

    def release(self) -> None:
        self.released.set()

    def run_until(self, event=None) -> None:
        with self.lock:
            while self.queue:
                kind, item = self.queue.pop(0)
                if kind == "op":
                    item()
                elif item == event:
                    self.done.add(item)
                    return


def start(tmp_path, writer, name="d", **values):
    return start_dump_step("9", {}, values, name, False, directory=str(tmp_path), writer=writer, prompt_id="p")


def test_copy_enqueued_node_returns_then_the_writer_waits_for_the_event(tmp_path):
    device = FakeDevice()
    writer = DumpWriter(copier=device, max_bytes=1 << 20)
    samples = torch.arange(12.0).reshape(3, 4)
    expected = samples.clone()
    step, ticket = start(tmp_path, writer, latent={"samples": samples})
    device.log.append("node returned")
    assert ticket is not None and ticket.outcome is None
    assert step.summary["written"] is None and step.details["write"] == {"state": "pending", "background": True}
    assert not (tmp_path / "d.safetensors").exists()
    # A downstream node changes the tensor in place: on a GPU a kernel queued on the same stream,
    # after the copy (a device tensor changes through its stream only).
    device.enqueue(lambda: samples.mul_(-1))
    device.release()
    outcome = ticket.wait(WATCHDOG_S)
    assert device.log == [
        "copy enqueued",
        "event recorded",
        "node returned",
        "writer waits for the event",
        "event complete",
    ]
    assert torch.equal(load_file(str(tmp_path / "d.safetensors"))["latent.samples"], expected)
    assert outcome.background and outcome.result is not None and outcome.written_unix_s is not None
    assert writer.in_flight_bytes == 0
    device.run_until()
    assert torch.equal(samples, -expected)  # the change did happen, after the copy
    finished = finish_dump_step(step, outcome)
    assert finished.summary["written"] is True and finished.summary["file_name"] == "d.safetensors"
    write = finished.details["write"]
    assert (write["state"], write["background"], write["reason"]) == ("written", True, None)
    assert write["in_prompt_s"] >= 0 and write["copy_wait_s"] >= 0


def test_on_the_cpu_a_plain_copy_is_taken_before_the_node_returns(tmp_path):
    writer = DumpWriter(max_bytes=1 << 20)  # the real backend: CPU tensors are not its
    image = torch.rand(2, 8, 8, 3)
    expected = image.clone()
    gate = threading.Event()
    writer._worker.submit(lambda: gate.wait(WATCHDOG_S))  # the writer busy: this dump waits its turn
    step, ticket = start(tmp_path, writer, image=image)
    image.zero_()  # in place, after the node returned, before the file is written
    gate.set()
    outcome = ticket.wait(WATCHDOG_S)
    assert outcome.result is not None and outcome.background
    assert torch.equal(load_file(str(tmp_path / "d.safetensors"))["image"], expected)


def test_the_dump_path_reads_nothing_back_and_keeps_no_device_tensor(tmp_path):
    device = FakeDevice()
    writer = DumpWriter(copier=device, max_bytes=1 << 20)
    latent = {"samples": torch.randn(2, 4, 8, 8), "noise_mask": torch.ones(2, 1, 8, 8)}
    collected = collect_tensors(latent=latent)
    from monitors.dumps.files import plan_dump

    plan = plan_dump(str(tmp_path), "quiet", collected)
    with ReadbackCounter() as counter:
        ticket = writer.write(plan, collected, {})
    assert counter.n_readbacks == 0 and ticket.outcome is None
    with ReadbackCounter() as counter:  # the whole step: the statistics come from the writer's copies
        step, ticket2 = start(tmp_path, writer, "quiet2", latent=latent)
    assert counter.n_readbacks == 0
    assert all(t["min"] is None for t in step.details["tensors"].values())
    device.release()
    assert ticket.wait(WATCHDOG_S).result is not None
    finished = finish_dump_step(step, ticket2.wait(WATCHDOG_S))
    for name, tensor in collected.tensors.items():  # the same figures as described in the prompt
        assert finished.details["tensors"][name] == {**describe_tensor_bounded(tensor), "shape": list(tensor.shape)}


def test_the_cap_on_bytes_in_flight_writes_in_the_prompt_and_says_so(tmp_path):
    device = FakeDevice()
    writer = DumpWriter(copier=device, max_bytes=600)
    first, first_ticket = start(tmp_path, writer, "first", image=torch.zeros(100))  # 400 bytes in flight
    second, second_ticket = start(tmp_path, writer, "second", image=torch.ones(100))  # 800 > 600
    assert first_ticket is not None and second_ticket is None  # written at once, in the prompt
    assert second.summary["written"] is True and (tmp_path / "second.safetensors").exists()
    [finding] = [f for f in second.findings if f.code == "written_in_prompt"]
    assert finding.level == "warning" and "400 B of earlier dumps" in finding.message
    assert ENV_MAX_IN_FLIGHT in finding.message
    assert second.details["write"]["background"] is False
    assert writer.in_flight_bytes == 400
    device.release()
    assert first_ticket.wait(WATCHDOG_S).result is not None and writer.in_flight_bytes == 0


def test_a_cap_of_zero_writes_every_dump_in_the_prompt(tmp_path, monkeypatch):
    monkeypatch.setenv(ENV_MAX_IN_FLIGHT, "0")
    step, ticket = start(tmp_path, DumpWriter(copier=FakeDevice()), image=torch.zeros(3))
    assert ticket is None and step.summary["written"] is True
    assert "every dump is written in the prompt" in step.details["write"]["reason"]


def test_a_write_that_fails_on_the_writer_says_why(tmp_path):
    class LostDevice(FakeDevice):
        def wait(self, event):
            raise RuntimeError("device lost")

    writer = DumpWriter(copier=LostDevice(), max_bytes=1 << 20)
    step, ticket = start(tmp_path, writer, image=torch.zeros(3))
    finished = finish_dump_step(step, ticket.wait(WATCHDOG_S))
    assert finished.summary["written"] is False and finished.summary["file_name"] is None
    assert finished.details["write"]["state"] == "not_written"
    assert finished.details["write"]["reason"] == "Dump not written: RuntimeError: device lost"
    assert [f.code for f in finished.findings if f.level == "error"] == ["not_written"]
    assert finished.monitor_errors == ("dump writer: RuntimeError: device lost",)
    assert writer.in_flight_bytes == 0 and not (tmp_path / "d.safetensors").exists()


def test_build_dump_step_waits_for_its_file(tmp_path):
    device = FakeDevice()
    device.release()
    step = build_dump_step(
        "9", {}, {"image": torch.ones(4)}, "waited", False, directory=str(tmp_path),
        writer=DumpWriter(copier=device, max_bytes=1 << 20),
    )  # fmt: skip
    assert step.summary["written"] is True and step.details["write"]["background"] is True


def test_the_recorder_replaces_the_pending_step_while_its_run_is_active(tmp_path):
    recorder = RunRecorder(RunStore(str(tmp_path / "runs")), probes=fake_probes("no GPU"))
    device = FakeDevice()
    writer = DumpWriter(copier=device, max_bytes=1 << 20)
    recorder.begin_run("p1")
    pending, ticket = start(tmp_path, writer, image=torch.ones(4))
    assert recorder.add_step(pending)
    ticket.on_done(lambda outcome: recorder.replace_step(pending, finish_dump_step(pending, outcome)))
    device.release()
    assert writer.join(WATCHDOG_S)
    report = recorder.end_run("success")
    [step] = report.steps
    assert step.summary["written"] is True and step.details["write"]["state"] == "written"
    assert recorder.replace_step(step, pending) is False  # no active run: nothing replaced


@pytest.mark.parametrize("raw, expected", [("", 1 << 30), ("5", 5), ("-1", 1 << 30), ("x", 1 << 30)])
def test_the_in_flight_setting(monkeypatch, raw, expected):
    from monitors.dumps.writer import max_in_flight_bytes

    monkeypatch.setenv(ENV_MAX_IN_FLIGHT, raw)
    assert max_in_flight_bytes() == expected


def test_the_real_copy_backend_takes_only_cuda_tensors_and_never_initialises_cuda():
    from types import SimpleNamespace

    from monitors.probes.device_copy import CudaCopyBackend

    backend = CudaCopyBackend()
    assert backend.handles(torch.zeros(2)) is False
    fake_cuda_tensor = SimpleNamespace(device=SimpleNamespace(type="cuda"))
    if not torch.cuda.is_initialized():
        assert backend.handles(fake_cuda_tensor) is False
        assert not torch.cuda.is_initialized()


def test_host_buffers_are_reused_bounded_and_dropped_when_the_writer_is_idle(tmp_path):
    from monitors.dumps.host_copies import HostBuffers

    buffers = HostBuffers()
    first, buffer = buffers.copy_of(torch.arange(6.0).reshape(2, 3))
    assert first.shape == (2, 3) and torch.equal(first, torch.arange(6.0).reshape(2, 3))
    buffers.give_back([buffer], max_bytes=1 << 10)
    again, reused = buffers.copy_of(torch.ones(5, dtype=torch.int16))  # 10 bytes fit in the 24
    assert reused is buffer and torch.equal(again, torch.ones(5, dtype=torch.int16))
    buffers.give_back([reused, torch.empty(100, dtype=torch.uint8)], max_bytes=110)
    assert buffers.kept_bytes == 100  # the largest kept first, within the bound
    buffers.give_back([torch.empty(30, dtype=torch.uint8), torch.empty(7, dtype=torch.uint8)], max_bytes=1000)
    small, taken = buffers.copy_of(torch.ones(2))  # the smallest that fits, out of several
    assert int(taken.numel()) == 30 and buffers.kept_bytes == 107
    writer = DumpWriter(max_bytes=1 << 20, buffers_idle_s=3600)  # dropped here by the test's calls
    _, ticket = start(tmp_path, writer, image=torch.ones(64))
    ticket.wait(WATCHDOG_S)
    assert writer.join(WATCHDOG_S) and writer.host_buffers.kept_bytes == 256
    writer._drop_buffers_if_idle(0)  # a later dump came: kept
    assert writer.host_buffers.kept_bytes == 256
    writer._drop_buffers_if_idle(1)  # no dump since the first: dropped
    assert writer.host_buffers.kept_bytes == 0


def test_statistics_of_a_device_tensor_are_read_back_by_the_writer_not_the_node(tmp_path, monkeypatch):
    from monitors.numeric import tensor_stats
    from monitors.numeric.tensor_stats import value_stats

    # Kept patch of a private name: no GPU here, so the whole-tensor path a device tensor takes
    # is forced on these CPU tensors (the same kernels).
    monkeypatch.setattr(tensor_stats, "_whole_tensor", lambda flat: True)

    device = FakeDevice()
    writer = DumpWriter(copier=device, max_bytes=1 << 30)
    samples = torch.randn(4, 4, 64, 72, generator=torch.Generator().manual_seed(5))  # above 64 Ki elements
    mask = torch.randn(1 << 17)
    mask[7] = float("nan")
    expected = value_stats(samples, whole_tensor=True)
    with ReadbackCounter() as counter:
        step, ticket = start(tmp_path, writer, latent={"samples": samples, "noise_mask": mask})
    assert counter.n_readbacks == 0  # the node waited for nothing
    assert step.details["tensors"]["latent.samples"]["mean"] is None
    assert step.details["tensors"]["latent.samples"]["shape"] == [4, 4, 64, 72]
    device.enqueue(lambda: samples.zero_())  # later, in place: reaches neither the file nor the figures
    device.release()
    finished = finish_dump_step(step, ticket.wait(WATCHDOG_S))
    described = finished.details["tensors"]["latent.samples"]
    assert {k: described[k] for k in expected} == expected
    assert described["device"] == "cpu" and described["stats_skipped"] is False
    masked = finished.details["tensors"]["latent.noise_mask"]
    assert masked["n_nan"] == 1 and masked["mean"] is not None  # the fallback, on the host copy
    assert [f.code for f in finished.findings if f.level == "warning"] == ["non_finite"]


def test_statistics_enqueued_for_a_dump_written_in_the_prompt_are_read_there(tmp_path):
    writer = DumpWriter(copier=FakeDevice(), max_bytes=0)  # every dump in the prompt
    x = torch.randn(1 << 17)
    step, ticket = start(tmp_path, writer, image=x)
    assert ticket is None and step.summary["written"] is True
    assert step.details["tensors"]["image"]["mean"] == pytest.approx(float(x.double().mean()), abs=1e-5)


def test_statistics_that_fail_in_the_prompt_cost_the_file_nothing(tmp_path, monkeypatch):
    import monitors.dumps.writer as writer_module

    def broken(pending, fallback):
        raise RuntimeError("statistics broke")

    monkeypatch.setattr(writer_module, "finish_stats", broken)
    writer = DumpWriter(max_bytes=0)  # every dump in the prompt, as the background writer would
    step, ticket = start(tmp_path, writer, image=torch.rand(1, 8, 8, 3))
    assert ticket is None and step.summary["written"] is True
    assert step.details["tensors"]["image"]["mean"] is None  # left unknown, logged
