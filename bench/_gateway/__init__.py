"""The parts of ``bench/gateway.py``: the upstream it calls, the processes it starts, the
measurement and the report."""
