"""Handlers that the queue tests run in real ``oncelog consume`` processes."""
