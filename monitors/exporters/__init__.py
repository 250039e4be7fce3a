"""Exporters: the self-contained HTML report, the Chrome/Perfetto trace and the Prometheus
exposition. They read reports; they measure nothing.
"""
