"""The command line (`python -m monitors aggregate|compare|trace|...`: commands.py) and the
aggregation and comparison of run reports it prints (aggregate.py)."""
