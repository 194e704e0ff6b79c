"""The parts of ``bench/peers.py``: ``agents`` (one 20-step agent per framework, run in
child processes), ``replay`` (oncelog's statements replayed raw, the floor under it),
``timing`` (what the parent measures) and ``report`` (the Markdown)."""
