import logging

import pytest

from monitors.probes import set_probes
from monitors.probes.fake import fake_probes


@pytest.fixture
def probes_for():
    """Install fake probes for a named scenario as the process default; restored afterwards."""
    installed = []

    def install(scenario: str = "no GPU"):
        probes = fake_probes(scenario)
        installed.append(set_probes(probes))
        return probes

    yield install
    if installed:
        set_probes(installed[0])


@pytest.fixture
def caplog_warnings(caplog):
    caplog.set_level(logging.WARNING)
    return caplog


@pytest.fixture(autouse=True)
def no_span_left_open():
    """Spans share one process-wide registry: a test must close every span it opens."""
    from monitors.engine import span

    yield
    leaked = span.open_span_count()
    with span._registry_lock:
        span._open_spans.clear()
    assert leaked == 0, f"{leaked} span(s) left open"
