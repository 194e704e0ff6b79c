"""Value objects, budget values, canonical JSON, the hash chain, secrets, what is shown."""
