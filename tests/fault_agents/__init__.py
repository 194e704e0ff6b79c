"""Subprocess agents for the storage fault tests (run as scripts, never imported by them)."""
