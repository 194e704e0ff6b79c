"""The workloads and the callgrind runs of ``bench/instructions.py``."""
