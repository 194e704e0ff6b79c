"""The parts of ``bench/workers.py``, one job per module.

The script is run as a file, so ``bench/`` is on ``sys.path`` and this folder imports as
the package ``_workers``; the worker processes import ``_workers.agent`` the same way (they
start in ``bench/``). Inside the package, modules import each other relatively.
"""
