"""What `oncelog demo` and `oncelog crashtest` run."""
