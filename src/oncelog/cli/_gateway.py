"""``oncelog gateway --config FILE``: MCP over Streamable HTTP, every tool call an effect
(the gateway extra)."""

from __future__ import annotations

import click

import oncelog


def _listen(value: str) -> tuple[str, int]:
    host, _, port = value.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise click.BadParameter(f"HOST:PORT, e.g. 127.0.0.1:8765, not {value!r}")
    return host.strip("[]"), int(port)


@click.command("gateway")
@click.option(
    "--config", "config_path", type=click.Path(exists=True, dir_okay=False), required=True,
    help="JSON file: the tools' kinds, the upstream MCP servers, the clients and their tokens.",
)  # fmt: skip
@click.option(
    "--listen", default="127.0.0.1:8765", show_default=True, metavar="HOST:PORT",
    help="Where to serve MCP (the endpoint is /mcp).",
)  # fmt: skip
@click.option(
    "--ledger", "--db", "db", envvar=["ONCELOG_URL", "ONCELOG_LEDGER"], default=None,
    metavar="URL",
    help="Ledger path or URL (default: $ONCELOG_URL, else ./.oncelog/ledger.db); replicas "
    "share one PostgreSQL ledger.",
)  # fmt: skip
def gateway(config_path: str, listen: str, db: str | None) -> None:
    """Serve the tools of MCP servers over Streamable HTTP at http://HOST:PORT/mcp, each
    call with a kind an effect performed once, whichever replica takes it (docs/gateway.md).

    \b
    oncelog gateway --config gateway.json --listen 0.0.0.0:8765 --ledger postgresql://...
    """
    host, port = _listen(listen)
    try:
        from oncelog.integrations import mcp_gateway
    except oncelog.ConfigurationError as exc:
        raise click.ClickException(str(exc)) from exc
    import anyio  # installed with mcp

    try:
        config = mcp_gateway.load_config(config_path)
    except oncelog.ConfigurationError as exc:
        raise click.UsageError(str(exc)) from exc
    try:
        with oncelog.open(db, notify_console_url=config.console_url) as ledger:
            anyio.run(mcp_gateway.serve, ledger, config, host, port)
    except oncelog.OnceLogError as exc:
        click.echo(f"Error: {oncelog.explain(exc)}", err=True)
        raise click.exceptions.Exit(exc.exit_code) from exc
    except mcp_gateway.UpstreamUnreachable as exc:  # at the start: its tools are unknown
        click.echo(f"Error: {exc}; the gateway starts once every upstream answers", err=True)
        raise click.exceptions.Exit(oncelog.EXIT_TRY_LATER) from exc
