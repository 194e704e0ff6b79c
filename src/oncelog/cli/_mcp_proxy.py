"""``oncelog mcp-proxy -- COMMAND``: guard any MCP server's tools (the mcp extra)."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

import click

import oncelog

from ._options import db_option, emit, json_option, opened

if TYPE_CHECKING:
    from oncelog.integrations.mcp_proxy import Choice


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
@click.option(
    "--list", "list_only", is_flag=True,
    help="Print each tool's kind and where it came from (config, annotation, default), and exit.",
)  # fmt: skip
@json_option
@db_option
def mcp_proxy(
    command: tuple[str, ...],
    config_path: str | None,
    run_id: str | None,
    list_only: bool,
    as_json: bool,
    db: str | None,
) -> None:
    """Serve the tools of the MCP server COMMAND (stdio) on stdio, each call an effect.
    SIGTERM drains: calls in progress end and are recorded, later ones answer Draining
    without reaching the server, and the proxy exits with 75 when its client closes.

    \b
    oncelog mcp-proxy --config tools.json --run-id ticket-4711 -- python server.py
    oncelog mcp-proxy --config tools.json --list -- python server.py
    """
    if as_json and not list_only:
        raise click.UsageError("--json goes with --list: the proxy itself speaks MCP on stdio")
    try:
        from oncelog.integrations import mcp_proxy
    except oncelog.ConfigurationError as exc:
        raise click.ClickException(str(exc)) from exc
    import anyio  # installed with mcp

    try:
        config = mcp_proxy.load_config(config_path)
    except oncelog.ConfigurationError as exc:
        raise click.UsageError(str(exc)) from exc
    if list_only:
        chosen = anyio.run(mcp_proxy.choices, list(command), config)
        shown = [_shown(choice) for choice in chosen]
        if as_json:
            emit(shown)
        else:
            _print(shown)
        return
    oncelog.handle_sigterm()
    with opened(db) as ledger:
        try:
            anyio.run(mcp_proxy.serve, ledger, list(command), config, run_id)
        except Exception as exc:
            refused = _configuration_error(exc)
            if refused is None:
                raise
            raise click.UsageError(str(refused)) from exc
    if oncelog.draining():
        sys.exit(oncelog.EXIT_TRY_LATER)


def _configuration_error(exc: BaseException) -> oncelog.ConfigurationError | None:
    """The config error inside the MCP client's task groups: a subject or a probe the
    config names wrongly, found once the server lists its tools."""
    if isinstance(exc, oncelog.ConfigurationError):
        return exc
    for inner in getattr(exc, "exceptions", ()):
        found = _configuration_error(inner)
        if found is not None:
            return found
    return None


def _shown(choice: Choice) -> dict[str, Any]:
    policy = choice.policy
    return {
        "tool": choice.tool,
        "kind": None if policy is None else str(getattr(policy.kind, "value", policy.kind)),
        "source": choice.source,
        "waits_for_a_person": choice.waits_for_a_person,
        "offered": policy is not None,
        "annotated": choice.annotated,
    }


def _print(shown: list[dict[str, Any]]) -> None:
    width = max([len("TOOL")] + [len(row["tool"]) for row in shown])
    click.echo(f"{'TOOL':<{width}}  {'KIND':<11}  {'FROM':<10}  APPROVAL")
    for row in shown:
        if not row["offered"]:
            click.echo(f"{row['tool']:<{width}}  {'-':<11}  {'-':<10}  not offered: no kind")
            continue
        approval = "a person" if row["waits_for_a_person"] else "-"
        warning = f"  (its server says {row['annotated']})" if row["annotated"] else ""
        click.echo(
            f"{row['tool']:<{width}}  {row['kind']:<11}  {row['source']:<10}  {approval}{warning}"
        )
