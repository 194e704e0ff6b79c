"""The parts of ``bench/effect_cost.py``: ``timing`` (interleaved batches of oncelog's
effects and the floor's, CPU and wall), ``counts`` (instructions, system calls, WAL
frames and bytes, each in child processes or files of its own) and ``report``."""
