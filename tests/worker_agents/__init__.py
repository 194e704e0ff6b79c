"""Handlers that ``tests/test_workers.py`` runs in real ``oncelog worker`` processes."""
