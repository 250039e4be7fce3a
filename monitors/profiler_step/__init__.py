"""The `profiling` step: its summary declaration (summary.py) and its readers (phases.py), below
the vocabulary and the exporters that read it; the profiler that makes one is monitors/pipeline_profiler/."""
