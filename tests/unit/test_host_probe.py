"""The host backend's own files (monitors/probes/host.py): /proc/stat's processor line as the
kernel writes it, the kept-open files after a fork and a close, and each fallback."""

from __future__ import annotations

import itertools
import os

import psutil
import pytest

import monitors.probes.host as host_module
from monitors.probes.host import MAX_CPU_READERS, HostBackend


def stat_file(tmp_path, first_line: str):
    path = tmp_path / "stat"
    path.write_text(first_line + "\ncpu0 1 2 3 4 5 6 7 8 9 10\nintr 1 2 3\n")
    return path


def rewrite(path, first_line: str) -> None:
    with open(path, "r+") as f:  # in place: the backend keeps the file open
        f.truncate(0)
        f.write(first_line + "\ncpu0 1 2 3 4 5 6 7 8 9 10\n")


def test_an_older_kernels_shorter_processor_line_is_read_alone(tmp_path):
    path = stat_file(tmp_path, "cpu  100 0 50 800 40 0 5 0")  # eight fields: no guest times
    host = HostBackend(proc_stat=str(path))
    assert host.cpu_pct() == 0.0
    rewrite(path, "cpu  150 0 60 900 40 0 5 0")  # busy 60 of 160
    assert host.cpu_pct() == 37.5


def test_the_shortest_processor_line_the_kernel_ever_wrote_has_no_iowait(tmp_path):
    path = stat_file(tmp_path, "cpu  100 0 50 800")  # user nice system idle
    host = HostBackend(proc_stat=str(path))
    assert host.cpu_pct() == 0.0
    rewrite(path, "cpu  130 0 50 870")
    assert host.cpu_pct() == 30.0


@pytest.mark.parametrize("first_line", ["intr 1 2 3 4 5 6", "cpu  1 2 3", "", "cpu  a b c d e"])
def test_a_processor_line_that_is_not_one_falls_back_to_psutil(tmp_path, monkeypatch, first_line):
    monkeypatch.setattr(host_module.psutil, "cpu_percent", lambda interval=None: 77.7)
    assert HostBackend(proc_stat=str(stat_file(tmp_path, first_line))).cpu_pct() == 77.7


def test_the_readings_kept_per_thread_are_bounded_and_known_threads_keep_theirs(tmp_path, monkeypatch):
    host = HostBackend(proc_stat=str(stat_file(tmp_path, "cpu  1 0 1 10 0 0 0 0 0 0")))
    idents = itertools.count(1)
    thread = [0]
    monkeypatch.setattr(host_module.threading, "get_ident", lambda: thread[0])
    for _ in range(MAX_CPU_READERS):
        thread[0] = next(idents)
        host.cpu_pct()
    assert len(host._last_cpu_ticks) == MAX_CPU_READERS  # not cleared before the bound
    host.cpu_pct()  # a thread already known, at the bound
    assert len(host._last_cpu_ticks) == MAX_CPU_READERS
    thread[0] = next(idents)
    host.cpu_pct()  # one more thread: the old readings go
    assert list(host._last_cpu_ticks) == [thread[0]]


def test_a_forked_child_opens_its_own_files_and_close_closes_them(tmp_path):
    statm = tmp_path / "statm"
    statm.write_text("1000 250 0 0 0 0 0\n")
    host = HostBackend(proc_statm=str(statm))
    assert host.process_rss_bytes() == 250 * os.sysconf("SC_PAGE_SIZE")
    inherited = host._fds[str(statm)]
    host._fds_pid = -1  # as a fork's child sees it: the files were opened by its parent
    assert host.process_rss_bytes() == 250 * os.sysconf("SC_PAGE_SIZE")
    opened = host._fds[str(statm)]
    assert opened != inherited and host._fds_pid == os.getpid()
    os.close(inherited)
    host.close()
    with pytest.raises(OSError):
        os.fstat(opened)


def test_without_statm_the_rss_comes_from_psutil(tmp_path):
    rss = HostBackend(proc_statm=str(tmp_path / "missing")).process_rss_bytes()
    assert rss > 0 and abs(rss - psutil.Process().memory_info().rss) < 256 * 1024**2


def test_the_high_water_mark_is_read_in_bytes_and_reset_by_writing_5(tmp_path):
    status = tmp_path / "status"
    status.write_text("Name:\tpython\nVmPeak:\t  900 kB\nVmHWM:\t  1234 kB\nVmRSS:\t  1000 kB\n")
    clear_refs = tmp_path / "clear_refs"
    clear_refs.write_text("")
    host = HostBackend(proc_status=str(status), proc_clear_refs=str(clear_refs))
    assert host.peak_rss_bytes() == 1234 * 1024
    assert host.reset_peak_rss() is True and clear_refs.read_text() == "5"


def test_cpu_count_is_psutils_logical_count():
    assert HostBackend().cpu_count() == psutil.cpu_count(logical=True)


def test_iowait_is_idle_time_from_the_first_kernels_that_counted_it(tmp_path):
    path = stat_file(tmp_path, "cpu  100 0 50 800 40")  # user nice system idle iowait
    host = HostBackend(proc_stat=str(path))
    host.cpu_pct()
    rewrite(path, "cpu  110 0 50 850 80")  # busy 10 of 100: iowait counts as idle
    assert host.cpu_pct() == 10.0


def test_one_tick_is_enough_for_a_figure(tmp_path):
    path = stat_file(tmp_path, "cpu  100 0 50 800 40 0 0 0 0 0")
    host = HostBackend(proc_stat=str(path))
    host.cpu_pct()
    rewrite(path, "cpu  101 0 50 800 40 0 0 0 0 0")
    assert host.cpu_pct() == 100.0
