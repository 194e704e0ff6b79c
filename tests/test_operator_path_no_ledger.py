"""A command pointed nowhere (no ``--db``, no ``$ONCELOG_URL``) before any agent ran in
its directory says where it looked and how to point it at the agents' ledger: a person's
first ``oncelog console`` met a bare "no ledger"."""

from __future__ import annotations

from pathlib import Path

from .test_operator_path_placeholders import pasted


def test_the_console_before_any_agent_ran_says_where_it_looked_and_how_to_point_it(
    tmp_path: Path,
) -> None:
    """No ``--db``, no ``$ONCELOG_URL``, no agent run here yet: not a bare "no ledger"."""
    told = pasted("oncelog console --port 0", "", tmp_path)  # ONCELOG_URL empty: unset
    assert told.returncode == 2, told.stdout + told.stderr
    said = told.stderr
    assert f"looks at .oncelog/ledger.db under {tmp_path}" in said, said
    assert "--db URL or ONCELOG_URL=URL" in said, said
    assert not (tmp_path / ".oncelog").exists()  # looking created nothing
