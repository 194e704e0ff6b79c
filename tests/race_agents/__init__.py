"""Agent processes started by ``tests/test_race.py``."""
