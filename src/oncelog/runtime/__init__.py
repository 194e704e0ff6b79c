"""Runs: what agent code calls, the pure decision, and the engine around it."""
