"""A module for ``test_values``' check of ``_lazy.defer``: imported only by that test."""

ANSWER = 42
