"""The journal as evidence: ``oncelog keys new``, ``oncelog verify``, ``oncelog export``."""

from __future__ import annotations

import sys
from dataclasses import asdict
from pathlib import Path

import click

import oncelog

from ._options import db_option, emit, json_option, opened

DEFAULT_KEY_DIR = Path("~/.config/oncelog/keys")


@click.group()
def keys() -> None:
    """Signing keys for checkpoints of the journal."""


@keys.command("new")
@click.option("--dir", "folder", default=str(DEFAULT_KEY_DIR), show_default=True,
              help="Where to write the key pair.")  # fmt: skip
def keys_new(folder: str) -> None:
    """Make an Ed25519 key pair: the private key (0600) signs, the public one verifies."""
    private, public = oncelog.new_key_pair(Path(folder).expanduser())
    click.echo(f"private key: {private}   (ONCELOG_SIGNING_KEY={private})")
    click.echo(f"public key:  {public}   (oncelog verify --public-key {public})")


@click.command()
@click.option("--public-key", "public_keys", multiple=True, metavar="FILE",
              help="A public key to check signatures with (repeat).")  # fmt: skip
@click.option("--against", metavar="FILE",
              help="An earlier `oncelog export` kept elsewhere: its checkpoints too.")  # fmt: skip
@click.option("--run", "run_id", default=None, help="Only this run's chain.")
@db_option
@json_option
def verify(
    public_keys: tuple[str, ...], against: str | None, run_id: str | None, db: str | None,
    as_json: bool,
) -> None:  # fmt: skip
    """Check every journal record's hash and every checkpoint; exit 1 on any problem."""
    with opened(db, create=False) as ledger:
        report = ledger.verify(public_keys=public_keys, against=against or (), run_id=run_id)
    if as_json:
        emit({**asdict(report), "ok": report.ok})
    else:
        for problem in report.problems:
            click.echo(f"PROBLEM {problem.kind}: {problem.message}")
        signatures = "checked" if report.signatures_checked else "not checked (no --public-key)"
        click.echo(
            f"{report.records} records in {report.runs} chains, {report.checkpoints} "
            f"checkpoints (signatures {signatures})"
            + (
                f", {report.before_chain} records from before the chain"
                if report.before_chain
                else ""
            )
            + (": ok" if report.ok else f": {len(report.problems)} problems")
        )
    sys.exit(0 if report.ok else 1)


@click.command()
@click.option("--run", "run_id", default=None, help="Only this run's records.")
@click.option("--after", "after_id", default=0, show_default=True, help="Records after this id.")
@click.option("--no-checkpoints", is_flag=True, help="Records only.")
@db_option
def export(run_id: str | None, after_id: int, no_checkpoints: bool, db: str | None) -> None:
    """Write the journal as JSON lines on standard output (records, then checkpoints)."""
    with opened(db, create=False) as ledger:
        for line in ledger.export(run_id=run_id, after_id=after_id, checkpoints=not no_checkpoints):
            click.echo(line)
