"""The numeric kernels every analyser shares: statistics of a tensor in bounded memory
(tensor_stats.py) and the same figures and tensor comparisons in one compiled pass (fused_kernels.py)."""
