"""``oncelog mcp-proxy -- COMMAND``: any MCP server (stdio), every tool call an effect.

The proxy starts the server as its child, offers its clients the server's own tools, and
makes each ``tools/call`` an oncelog effect of a run:

- the run: ``_meta["io.oncelog/run-id"]`` of the call, else the tool argument the config
  names in ``run_argument``, else ``--run-id`` (``$ONCELOG_RUN_ID``) for the session;
- the step: ``{tool}#{n}``, the n-th call of that tool in the run in this session, so a
  client restarted from the top, calling its tools again, gets the recorded results;
- the kind of each tool: from a small JSON config file (below), else, for a server the
  config trusts (``trust_annotations``), from the tool's annotations, else the config's
  ``default_kind`` (``_mcp_kinds``); a tool with none is not offered to the client (its
  model never sees it), and a call to it is refused;
- the key: the server receives it as ``_meta["io.oncelog/idempotency-key"]``, the same
  for every attempt of the call, so that it can perform it once.

A ``destructive`` tool (or one with ``"approval": true``) waits for a person: the call
answers with a tool error telling the client to wait for ``oncelog approve RUN STEP`` and
call again with the same arguments. Any other reason the run cannot go on (an effect in
doubt, a kill switch, a budget) is a tool error too, naming the reason.

    {
      "tools": {
        "search_tickets": "read",
        "send_email": "create",
        "delete_account": {"kind": "destructive"},
        "refund": {"kind": "payment", "dedupe_window": 86400, "once_per": ["order_id"]}
      },
      "default_kind": null,
      "run_argument": "ticket_id",
      "agent": "support",
      "trust_annotations": false
    }

A tool's ``once_per`` names the argument fields whose values, after the tool's name, are
the effect's subject (``["refund", "A-42"]``): a call asking again for the same subject, in
any run, gets the first call's result (``"repeat": "error"``: an error) instead of acting;
``once_for`` (seconds) frees a done subject after that long. A field the tool's input
schema does not have stops the proxy at its start; a call without one of the fields is
refused. Each field's value is taken as the type the input schema declares for it
(``_mcp_subjects``: ``42.0`` for an integer is ``42``, ``"42"`` is refused); an object
(``{"order_id": "integer"}``) instead of the list declares the types in the config, for a
server whose schema does not.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path
from typing import Any, cast

from oncelog import AmbiguousOutcome, ApprovalRequired, Ledger, OnceLogError
from oncelog.display import resolve_command

from ._common import Policy
from ._common import missing_extra as _missing
from ._mcp_config import (
    CONFIG_KEYS,
    ProxyConfig,
    check_subject,
    parse_config,
    read_json,
    typed_subject,
    unknown_settings,
)
from ._mcp_kinds import Choice
from ._mcp_probes import check_probes, with_probe
from ._mcp_subjects import as_declared

try:
    import anyio.from_thread
    import anyio.to_thread
    import mcp.types as types
    from mcp import ClientSession, MCPError, StdioServerParameters
    from mcp.client.stdio import stdio_client
    from mcp.server.context import ServerRequestContext
    from mcp.server.lowlevel import Server
    from mcp.server.stdio import stdio_server
except ImportError as exc:  # pragma: no cover - exercised without the extra
    raise _missing("mcp", "MCP") from exc

from ._mcp_gone import UpstreamUnreachable, unsent_not_performed, watched  # mcp, as above
from ._proxy_runs import ProxyRun

__all__ = ["KEY_META", "RUN_META", "Choice", "ProxyConfig", "choices", "load_config", "serve"]


log = logging.getLogger("oncelog")

# Reverse-DNS prefixes, as the MCP specification asks of _meta keys; any other key under
# them in a client's call is refused, so that a misspelt run id never falls to --run-id.
RUN_META = "io.oncelog/run-id"
KEY_META = "io.oncelog/idempotency-key"
_OURS = ("io.oncelog/", "oncelog/")


def load_config(path: str | Path | None) -> ProxyConfig:
    """Read the proxy's JSON config; no file means no tool is declared."""
    if path is None:
        return ProxyConfig()
    data = read_json(path, "mcp-proxy")
    unknown_settings(data, path, CONFIG_KEYS)
    return parse_config(data, path)


async def serve(
    ledger: Ledger, command: Sequence[str], config: ProxyConfig, run_id: str | None
) -> None:
    """Start ``command`` as an MCP server and serve its tools on this process's stdio,
    until the client closes it."""
    exited = anyio.Event()  # set when the server's output ends: it exited
    leaving = False  # the proxy stops the server itself: its end is no news

    def gone() -> None:
        if not (leaving or exited.is_set()):
            log.warning(
                "mcp-proxy: the MCP server exited; its calls are refused, unsent, until "
                "this proxy is started again"
            )
        exited.set()

    async with _upstream(command, gone) as upstream:
        proxy = _Proxy(ledger, upstream, config, run_id, exited)
        await proxy.learn_tools()
        server: Server[Any] = Server(
            "oncelog-mcp-proxy", on_list_tools=proxy.list_tools, on_call_tool=proxy.call_tool
        )
        try:
            async with stdio_server() as (client_read, client_write):
                await server.run(client_read, client_write, server.create_initialization_options())
        finally:
            leaving = True
            await proxy.end()


async def choices(command: Sequence[str], config: ProxyConfig) -> list[Choice]:
    """Start ``command`` as an MCP server and say which policy the proxy would give each
    of the tools it lists, and where it came from; no ledger is opened."""
    async with _upstream(command) as upstream:
        return [config.choose(tool.name, tool.annotations) async for tool in _tools(upstream)]


@contextlib.asynccontextmanager
async def _upstream(
    command: Sequence[str], gone: Callable[[], None] = lambda: None
) -> AsyncIterator[ClientSession]:
    """A session with the server ``command`` started; ``gone`` is called if it exits."""
    # The server gets the proxy's whole environment, as if it were started directly.
    server_params = StdioServerParameters(
        command=command[0], args=list(command[1:]), env=dict(os.environ)
    )
    transport = watched(stdio_client(server_params), gone)
    async with transport as (read, write), ClientSession(read, write) as upstream:
        await upstream.initialize()
        yield upstream


async def _tools(upstream: ClientSession) -> AsyncIterator[types.Tool]:
    """Every tool the server lists, page after page."""
    cursor: str | None = None
    while True:
        params = None if cursor is None else types.PaginatedRequestParams(cursor=cursor)
        try:
            listed = await upstream.list_tools(params=params)
        except MCPError as exc:  # a server without tools
            log.warning("mcp-proxy: the server lists no tools (%s)", exc)
            return
        for tool in listed.tools:
            yield tool
        cursor = listed.next_cursor
        if not cursor:
            return


class _Proxy:
    def __init__(
        self, ledger: Ledger, upstream: ClientSession, config: ProxyConfig, run_id: str | None,
        exited: anyio.Event,
    ) -> None:  # fmt: skip
        self.ledger = ledger
        self.upstream = upstream
        self.exited = exited  # set: the server exited, and no call is sent into its pipes
        self.config = config
        self.run_id = run_id
        self.runs: dict[str, ProxyRun] = {}
        # Chosen once, from the tools listed at the start: a trusted server's annotations
        # cannot change a tool's kind in the middle of a session.
        self.chosen: dict[str, Choice] = {}
        self.schemas: dict[str, dict[str, Any]] = {}  # each listed tool's input schema

    async def learn_tools(self) -> None:
        """Choose each tool's policy, and tell the ledger what each offered tool's result
        looks like (an MCP result, with the tool's output schema), so that a person
        resolving one of its calls gives one."""
        async for tool in _tools(self.upstream):
            choice = self.config.choose(tool.name, tool.annotations)
            check_subject(tool, choice.policy)
            probe = self.config.probes.get(tool.name)
            choice = with_probe(typed_subject(tool, choice), probe, self._ask, tool.output_schema)
            choice = unsent_not_performed(choice)
            self.chosen[tool.name] = choice
            self.schemas[tool.name] = tool.input_schema
            if choice.policy is None:
                continue
            if choice.annotated is not None:
                log.warning(
                    "mcp-proxy: the config declares %s %s, but its server annotates it %s; "
                    "the config wins. If the tool can do what %s means, declare it so",
                    tool.name, choice.policy.kind, choice.annotated, choice.annotated,
                )  # fmt: skip
            if choice.source == "annotation":
                log.info("mcp-proxy: %s is %s, from its server's annotations",
                         tool.name, choice.policy.kind)  # fmt: skip
            declare = functools.partial(
                self.ledger.declare_result, tool.name, tool.output_schema, form="mcp"
            )
            await anyio.to_thread.run_sync(declare)
        check_probes(self.config.probes, self.chosen, self.schemas)

    def policy(self, tool: str) -> Policy | None:
        """A tool listed after the start has the config's policy only."""
        chosen = self.chosen.get(tool) or unsent_not_performed(self.config.choose(tool))
        return chosen.policy

    async def list_tools(
        self, ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        listed = await self.upstream.list_tools(params=params)
        offered = [t for t in listed.tools if self.policy(t.name) is not None]
        hidden = sorted(t.name for t in listed.tools if self.policy(t.name) is None)
        if hidden:
            log.warning(
                "mcp-proxy: not offering tools %s: no kind is declared for them in the config "
                '("tools": {"NAME": "KIND"}, "default_kind", or "trust_annotations" for a '
                "server whose annotations you trust)", hidden,
            )  # fmt: skip
        return listed.model_copy(update={"tools": offered})

    async def call_tool(
        self, ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        # Recorded and sent as the schema types them, as the gateway does: 42.0 in one run
        # and 42 in another are one subject's one call, not a drift that stops the second.
        arguments = as_declared(params.arguments or {}, self.schemas.get(params.name))
        meta: dict[str, Any] = dict(params.meta or {})
        unknown = sorted(k for k in meta if k.startswith(_OURS) and k != RUN_META)
        if unknown:
            return _error(
                f"oncelog: unknown _meta keys {unknown}: the run of a call is "
                f"_meta[{RUN_META!r}]; the proxy itself gives the server {KEY_META!r}"
            )
        run_id = self._run_of(meta, arguments)
        if run_id is None:
            return _error(
                f"oncelog: no run id for this call: set _meta[{RUN_META!r}], start the proxy "
                "with --run-id (or $ONCELOG_RUN_ID), or name a run_argument in its config"
            )
        policy = self.policy(params.name)
        if policy is None:
            return _error(
                f"oncelog: no kind is declared for tool {params.name!r} in the proxy's config: "
                f'add it to "tools" ({{"{params.name}": "create"}}, ...) or set "default_kind"'
            )
        run = self.runs.setdefault(run_id, ProxyRun(self.ledger, run_id, self.config.agent))
        try:
            recorded = await run.call(params.name, arguments, policy, self._forward)
        except UpstreamUnreachable as exc:  # recorded not performed
            return _error(f"oncelog: {exc}")
        except ApprovalRequired as exc:
            return _error(
                f"oncelog: {exc.message}. Wait until a person has approved it, then call "
                "this tool again with the same arguments."
            )
        except AmbiguousOutcome as exc:
            return _error(
                f"oncelog: AmbiguousOutcome in run {exc.run_id!r}: {exc.message}. A person "
                "decides: "
                + resolve_command(
                    exc.run_id or "RUN_ID",
                    exc.step_id or "STEP_ID",
                    exc.attempt,
                    then="done",
                    options="--text 'WHAT IT RETURNED' --by NAME",
                )
                + " (or not_done, or abandon); then call this tool again."
            )
        except OnceLogError as exc:
            return _error(f"oncelog: {type(exc).__name__}: {exc.message}")
        except Exception as exc:  # an idempotent tool's failure: recorded not done
            return _error(f"{type(exc).__name__}: {exc}")
        return types.CallToolResult.model_validate(recorded)

    def _run_of(self, meta: dict[str, Any], arguments: dict[str, Any]) -> str | None:
        if isinstance(meta.get(RUN_META), str):
            return str(meta[RUN_META])
        named = self.config.run_argument
        if named is not None and isinstance(arguments.get(named), str):
            return str(arguments[named])
        return self.run_id

    def _ask(self, tool: str, arguments: Any, key: str) -> Any:
        """An upstream tool's result, from a call's worker thread (a probe's question)."""
        return anyio.from_thread.run(self._forward, tool, arguments, key)

    async def _forward(self, tool: str, arguments: Any, key: str) -> Any:
        if self.exited.is_set():
            raise UpstreamUnreachable(
                "the MCP server this proxy started has exited; nothing was sent. Restart the "
                "proxy (its client's MCP server) and call again: the call is sent then"
            )
        meta = cast(types.RequestParamsMeta, {KEY_META: key})
        result = await self.upstream.call_tool(tool, arguments, meta=meta)
        return result.model_dump(mode="json", by_alias=True, exclude_none=True)

    async def end(self) -> None:
        for run in self.runs.values():
            await run.end()


def _error(text: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(text=text)], is_error=True)
