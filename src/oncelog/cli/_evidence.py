"""The journal as evidence: ``oncelog keys new``, ``oncelog verify``, ``oncelog export``."""

from __future__ import annotations

import sys
from dataclasses import asdict
from pathlib import Path

import click

import oncelog

from ._options import db_option, emit, json_option, opened, say

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
@click.option("--archive", "archives", multiple=True, metavar="FILE",
              help="A prune archive: check it against its anchor too (repeat).")  # fmt: skip
@db_option
@json_option
def verify(
    public_keys: tuple[str, ...], against: str | None, run_id: str | None,
    archives: tuple[str, ...], db: str | None, as_json: bool,
) -> None:  # fmt: skip
    """Check every journal record's hash and every checkpoint; exit 1 on any problem."""
    with opened(db, create=False) as ledger:
        report = ledger.verify(public_keys=public_keys, against=against or (), run_id=run_id)
        checked = [ledger.verify_archive(path, public_keys=public_keys) for path in archives]
    ok = report.ok and all(archive.ok for archive in checked)
    if as_json:
        emit({**asdict(report), "ok": ok, "archives": [
            {**asdict(archive), "ok": archive.ok} for archive in checked
        ]})  # fmt: skip
    else:
        for archive in checked:
            for wrong in archive.problems:
                say(f"PROBLEM archive {archive.archive}: {wrong}")
            say(
                f"archive {archive.archive}: {archive.records} records of {archive.runs} runs, "
                f"{archive.anchored} removed under its anchor"
                + (f", {len(archive.unanchored)} not removed by it" if archive.unanchored else "")
                + (": ok" if archive.ok else f": {len(archive.problems)} problems")
            )
        if report.pruned_runs:
            at = ", ".join(f"{record} ({name})" for record, name in report.anchors)
            say(
                f"pruned: {report.pruned_runs} runs ({report.pruned_records} records), "
                f"anchored at journal records {at}"
            )
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
    sys.exit(0 if ok else 1)


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
