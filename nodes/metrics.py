"""The pack's one fleet-metrics registry (monitors/exporters/prometheus.py), made on first use.

Served by nodes/routes.py as `GET /pipeline_monitor/metrics`; fed from the first prompt on by
nodes/profile_hook.py.
"""

from __future__ import annotations

from ..monitors.exporters.prometheus import PROMETHEUS_MISSING, FleetMetrics
from ..monitors.lazy import Lazy
from .runtime import get_runtime

__all__ = ["PROMETHEUS_MISSING", "get_fleet_metrics", "set_fleet_metrics"]

_metrics = Lazy(lambda: FleetMetrics(get_runtime))
get_fleet_metrics = _metrics.get
set_fleet_metrics = _metrics.set  # tests
