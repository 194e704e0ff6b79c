"""The process around runs: run_main, the SIGTERM drain, leases, workers."""
