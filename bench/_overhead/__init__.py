"""The parts of ``bench/overhead.py``, one measurement (or one chore) per module.

The script is run as a file, so ``bench/`` is on ``sys.path`` and this folder imports as
the package ``_overhead``; inside it, modules import each other relatively.
"""
