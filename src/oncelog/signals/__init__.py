"""Signals every floor reads: the SIGTERM drain flag and the crash points tests arm."""
