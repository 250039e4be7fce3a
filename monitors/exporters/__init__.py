"""Exporters: the self-contained HTML report and the Chrome/Perfetto trace (and, later, the
Prometheus exposition). They read reports; they measure nothing.
"""
