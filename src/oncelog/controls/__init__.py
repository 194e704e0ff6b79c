"""Alerts, notices to a person, and waiting for a person's decision."""
