"""The journal's hash chain, signed checkpoints, verify, export and shipping."""
