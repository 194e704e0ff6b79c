"""The parts of ``bench/peers.py``: ``agents`` (one 20-step agent per framework, run in
child processes), ``timing`` (what the parent measures) and ``report`` (the Markdown)."""
