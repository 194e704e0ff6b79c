"""``oncelog console``: the web console, on this machine only unless told otherwise."""

from __future__ import annotations

from pathlib import Path

import click

import oncelog

from ._options import db_option, opened

EXPOSED = (
    "warning: listening on {host}, not a loopback address: anyone who can reach it and has "
    "the token can approve, resolve and halt, and plain HTTP carries the token unencrypted. "
    "Put a TLS proxy in front, or use --host 127.0.0.1 and an SSH tunnel."
)


@click.command()
@click.option(
    "--host",
    default="127.0.0.1",
    show_default=True,
    help="Address to listen on; anything but loopback exposes the console to the network.",
)
@click.option(
    "--port", default=8470, show_default=True, type=click.IntRange(0, 65535), help="0: any free."
)
@click.option(
    "--token-file",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Where the login token is kept, mode 0600 [default: ~/.config/oncelog/console-token].",
)
@click.option("--new-token", is_flag=True, help="Replace the token: every session ends.")
@click.option(
    "--allow-host",
    "also",
    multiple=True,
    metavar="NAME",
    help="Another name the console is reached by (the Host header is checked); repeat.",
)
@db_option
def console(
    host: str,
    port: int,
    token_file: Path | None,
    new_token: bool,
    also: tuple[str, ...],
    db: str | None,
) -> None:
    """Serve the web console: approve, resolve and halt with the evidence on screen."""
    try:
        from .. import console as web
    except oncelog.ConfigurationError as exc:
        raise click.ClickException(str(exc)) from exc
    if not web.is_loopback(host):
        click.echo(EXPOSED.format(host=host), err=True)
    with opened(db, create=False) as ledger:
        token = web.console_token(token_file or web.DEFAULT_TOKEN_FILE, rotate=new_token)
        sock = web.listen(host, port)
        port = sock.getsockname()[1]
        base = f"http://{web.url_host(host)}:{port}"
        click.echo(f"oncelog console on {base}/ (ledger: {db or oncelog.DEFAULT_PATH})")
        click.echo(f"log in: {base}/login?token={token}")
        app = web.create_app(ledger, web.Access.for_address(token, host, port, also))
        web.serve(app, sock)
