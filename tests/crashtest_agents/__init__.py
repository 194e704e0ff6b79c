"""Agents that ``tests/test_crashtest.py`` hands to ``oncelog crashtest``: one done right,
and one for each mistake it must catch."""
