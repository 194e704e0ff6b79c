"""The process around runs: run_main, leases and their heartbeats."""
