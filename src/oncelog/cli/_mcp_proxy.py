"""``oncelog mcp-proxy -- COMMAND``: guard any MCP server's tools (the mcp extra)."""

from __future__ import annotations

import sys

import click

import oncelog

from ._options import db_option, opened


@click.command("mcp-proxy", context_settings={"ignore_unknown_options": True})
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
@click.option(
    "--config", "config_path", type=click.Path(exists=True, dir_okay=False), default=None,
    help="JSON file giving each tool's kind, and how to find a call's run.",
)  # fmt: skip
@click.option(
    "--run-id", envvar="ONCELOG_RUN_ID", default=None,
    help="The run of calls that name none (default: $ONCELOG_RUN_ID).",
)  # fmt: skip
@db_option
def mcp_proxy(
    command: tuple[str, ...], config_path: str | None, run_id: str | None, db: str | None
) -> None:
    """Serve the tools of the MCP server COMMAND (stdio) on stdio, each call an effect.
    SIGTERM drains: calls in progress end and are recorded, later ones answer Draining
    without reaching the server, and the proxy exits with 75 when its client closes.

    \b
    oncelog mcp-proxy --config tools.json --run-id ticket-4711 -- python server.py
    """
    try:
        from oncelog.integrations import mcp_proxy
    except oncelog.ConfigurationError as exc:
        raise click.ClickException(str(exc)) from exc
    import anyio  # installed with mcp

    oncelog.handle_sigterm()
    with opened(db) as ledger:
        try:
            config = mcp_proxy.load_config(config_path)
        except oncelog.ConfigurationError as exc:
            raise click.UsageError(str(exc)) from exc
        anyio.run(mcp_proxy.serve, ledger, list(command), config, run_id)
    if oncelog.draining():
        sys.exit(oncelog.EXIT_TRY_LATER)
