"""Value objects, canonical JSON and secret fields."""
