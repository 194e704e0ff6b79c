"""``oncelog gateway``: an MCP server over Streamable HTTP in front of MCP servers, every
tool call with a kind an oncelog effect, performed once whichever replica takes it.

The gateway serves ``/mcp`` statelessly (no session: each POST is one JSON-RPC request,
answered in JSON), and offers its clients the tools of its upstream servers (Streamable
HTTP or stdio), each under its own name; two upstreams listing one name stop the gateway
at its start. A tool's kind comes from the config as for ``oncelog mcp-proxy``
(``_mcp_config``): a tool without one is neither listed nor callable.

Each ``tools/call`` (``_gateway_calls``):

- its run: ``_meta["io.oncelog/run-id"]``, else the ``Oncelog-Run-Id`` header, else the
  argument ``run_argument`` names, else ``default_run``;
- its step: ``TOOL/CALL_ID`` with ``_meta["io.oncelog/call-id"]`` (else the
  ``Oncelog-Call-Id`` header), the client's own stable name for the call (a model's
  tool-call id); without one, ``TOOL/args:DIGEST`` of its canonical arguments, so the same
  call asked twice in one run is one step, answered from the ledger the second time;
- the upstream gets the key in ``_meta["io.oncelog/idempotency-key"]``.

A call that waits for a person answers with the specification's ``input_required``
result: a URL-mode elicitation whose URL is the console's signed decision page for that
approval request, and a ``requestState`` bound to the call (``_gateway_state``). Only a
person's journalled decision lets the call run; an answer the client sends in band counts
for nothing. Other stops (an effect in doubt, a kill switch, a budget) are tool errors
naming the reason, as the proxy's.
"""

from __future__ import annotations

import functools
import logging
from collections import defaultdict
from typing import Any, cast

from oncelog import (
    NO_RESULT,
    AmbiguousOutcome,
    ApprovalRequired,
    ConfigurationError,
    Kind,
    Ledger,
    OnceLogError,
    RunLeased,
)
from oncelog.display import resolve_command

from ._common import Policy
from ._common import missing_extra as _missing
from ._gateway_config import GatewayConfig
from ._gateway_config import load_gateway_config as load_config
from ._gateway_http import CALLER, Caller, Guard
from ._gateway_state import StateRefused, StateSeal
from ._mcp_config import check_subject, typed_subject
from ._mcp_kinds import Choice
from ._mcp_probes import check_probes, with_probe
from ._mcp_subjects import as_declared

try:
    import anyio
    import anyio.from_thread
    import anyio.to_thread
    import mcp.types as types
    import uvicorn
    from mcp import MCPError
    from mcp.server.context import ServerRequestContext
    from mcp.server.lowlevel import Server
except ImportError as exc:  # pragma: no cover - exercised without the extra
    raise _missing("gateway", "MCP gateway") from exc

from ._gateway_calls import Asked, digest_of, perform, recorded, step_of  # anyio, with mcp
from ._gateway_upstreams import UpstreamLink  # mcp too
from ._mcp_gone import UpstreamUnreachable, unreached, unsent_not_performed

__all__ = [
    "CALL_META", "KEY_META", "RUN_META", "Gateway", "GatewayConfig", "UpstreamUnreachable", "app",
    "load_config", "serve",
]  # fmt: skip

log = logging.getLogger("oncelog")

RUN_META = "io.oncelog/run-id"
CALL_META = "io.oncelog/call-id"
KEY_META = "io.oncelog/idempotency-key"
_OURS = ("io.oncelog/", "oncelog/")
INVALID_PARAMS = -32602
APPROVAL_INPUT = "io.oncelog/approval"


class Gateway:
    """The MCP handlers of one gateway process, over its upstream clients."""

    def __init__(
        self, ledger: Ledger, config: GatewayConfig, upstreams: dict[str, UpstreamLink]
    ) -> None:
        self.ledger = ledger
        self.config = config
        self.upstreams = upstreams
        self.tools: dict[str, tuple[str, types.Tool]] = {}  # name -> (upstream, its listing)
        self.chosen: dict[str, Choice] = {}
        self.seal = StateSeal(ledger.stamp_key(), config.request_state_ttl)
        # One call of a run at a time in this process; other processes wait on its lease.
        self.locks: defaultdict[str, anyio.Lock] = defaultdict(anyio.Lock)

    async def learn_tools(self) -> None:
        """List every upstream's tools, choose each one's policy once, and refuse a name
        two upstreams list (a call could not say which it means)."""
        for name, link in self.upstreams.items():
            async for tool in link.list_tools():
                if tool.name in self.tools:
                    raise ConfigurationError(
                        f"upstreams {self.tools[tool.name][0]!r} and {name!r} both list a tool "
                        f"{tool.name!r}: give each gateway upstreams whose tool names differ"
                    )
                self.tools[tool.name] = (name, tool)
                choice = self.config.declarations.choose(tool.name, tool.annotations)
                check_subject(tool, choice.policy)
                probe = self.config.declarations.probes.get(tool.name)
                choice = with_probe(
                    typed_subject(tool, choice), probe, self._ask, tool.output_schema
                )
                choice = unsent_not_performed(choice)
                self.chosen[tool.name] = choice
                if choice.policy is not None:
                    declare = functools.partial(
                        self.ledger.declare_result, tool.name, tool.output_schema, form="mcp"
                    )
                    await anyio.to_thread.run_sync(declare)
        check_probes(self.config.declarations.probes, self.chosen, self.tools)
        hidden = sorted(n for n, c in self.chosen.items() if c.policy is None)
        if hidden:
            log.warning("gateway: not offering tools %s: no kind is declared for them", hidden)

    def _ask(self, tool: str, arguments: Any, key: str) -> Any:
        """An upstream tool's result, from a call's worker thread (a probe's question)."""
        return anyio.from_thread.run(self._forward, tool, arguments, key)

    def policy_of(self, tool: str, kind: str) -> Policy:
        chosen = self.chosen.get(tool)
        if chosen is not None and chosen.policy is not None:
            return chosen.policy
        # A tool gone from its upstream: its step's recorded kind.
        return Policy(Kind(kind), failures=unreached)

    async def list_tools(
        self, ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        caller = _caller()
        offered = [
            tool for name, (_, tool) in self.tools.items()
            if self.chosen[name].policy is not None and caller.client.may_call(name)
        ]  # fmt: skip
        return types.ListToolsResult(tools=offered)

    async def call_tool(
        self, ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult | types.InputRequiredResult:
        caller = _caller()
        asked = self._asked(caller, params)
        if params.request_state is not None:
            try:
                self.seal.check(params.request_state, self._claims(caller, asked))
            except StateRefused as exc:
                raise MCPError(INVALID_PARAMS, f"oncelog: {exc}") from None
            # Good once: a state is spent once the call it was made for has run (whoever
            # ran it), so a replay is refused rather than answered; the recorded result
            # stays one plain call away.
            spent, _ = await self.answered(asked)
            if spent:
                raise MCPError(
                    INVALID_PARAMS,
                    "oncelog: requestState already used: the call it was made for has run. "
                    "Call again without requestState to read its recorded result",
                )
        # params.input_responses are never read: an in-band answer is the client's word.
        lock = self.locks[asked.run_id]
        try:
            async with lock:
                return await self._answer(caller, asked)
        finally:  # no await between taking a lock and waiting on it: none is dropped in use
            if not lock.locked() and lock.statistics().tasks_waiting == 0:
                self.locks.pop(asked.run_id, None)

    async def _answer(
        self, caller: Caller, asked: Asked
    ) -> types.CallToolResult | types.InputRequiredResult:
        try:
            return await self._perform(asked)
        except ApprovalRequired as exc:
            return await self._waiting(caller, asked, exc)
        except AmbiguousOutcome as exc:
            return _error(
                f"oncelog: AmbiguousOutcome in run {exc.run_id!r}: {exc.message}. A person "
                "decides: " + resolve_command(
                    exc.run_id or "RUN_ID", exc.step_id or "STEP_ID", exc.attempt,
                    then="done", options="--no-result --by NAME",
                ) + " (or not_done, or abandon); then call this tool again."
            )  # fmt: skip
        except UpstreamUnreachable as exc:  # recorded not performed: the next call sends it
            return _error(f"oncelog: {exc}; call again with the same call id")
        except RunLeased:
            return _error(
                f"oncelog: run {asked.run_id!r} is held by another call past the gateway's "
                "lease_wait; call again later with the same call id"
            )
        except OnceLogError as exc:
            return _error(f"oncelog: {type(exc).__name__}: {exc.message}")
        except Exception as exc:  # an idempotent tool's failure: recorded not done
            return _error(f"{type(exc).__name__}: {exc}")

    def _asked(self, caller: Caller, params: types.CallToolRequestParams) -> Asked:
        """The call as an effect, or ``MCPError`` for a call the client may not make."""
        listed = self.tools.get(params.name)
        policy = None if listed is None else self.chosen[params.name].policy
        if listed is None or policy is None or not caller.client.may_call(params.name):
            raise MCPError(INVALID_PARAMS, f"Unknown tool: {params.name}")
        # Recorded and sent as the schema types them: 42.0 in one run and 42 in another
        # are one subject's one call, not a drift that stops the second run.
        arguments = as_declared(params.arguments or {}, listed[1].input_schema)
        meta: dict[str, Any] = dict(params.meta or {})
        unknown = sorted(k for k in meta if k.startswith(_OURS) and k not in (RUN_META, CALL_META))
        if unknown:
            raise MCPError(
                INVALID_PARAMS,
                f"oncelog: unknown _meta keys {unknown}: a call names its run in "
                f"{RUN_META!r} and itself in {CALL_META!r}",
            )
        run_id = self._run_of(caller, meta, arguments)
        if not caller.client.may_run(run_id):
            raise MCPError(INVALID_PARAMS, f"oncelog: this client may not call in run {run_id!r}")
        call_id = meta.get(CALL_META, caller.call_header)
        if call_id is not None and not isinstance(call_id, str):
            raise MCPError(INVALID_PARAMS, f"oncelog: {CALL_META} is a string")
        try:
            digest = digest_of(arguments, listed[1].input_schema)
            step_id = step_of(params.name, call_id, digest)
        except OnceLogError as exc:
            raise MCPError(INVALID_PARAMS, f"oncelog: {exc.message}") from None
        return Asked(run_id, step_id, params.name, arguments, digest, policy)

    def _run_of(self, caller: Caller, meta: dict[str, Any], arguments: dict[str, Any]) -> str:
        named = self.config.declarations.run_argument
        for found in (
            meta.get(RUN_META), caller.run_header,
            None if named is None else arguments.get(named), self.config.default_run,
        ):  # fmt: skip
            if isinstance(found, str) and found and len(found) <= 512 and "\x00" not in found:
                return found
            if found is not None:
                raise MCPError(INVALID_PARAMS, f"oncelog: {found!r} is no run id")
        raise MCPError(
            INVALID_PARAMS,
            f"oncelog: no run id for this call: set _meta[{RUN_META!r}], the Oncelog-Run-Id "
            "header, the config's run_argument, or its default_run",
        )

    async def _perform(self, asked: Asked) -> types.CallToolResult:
        def forward(tool: str, arguments: Any, key: str) -> Any:
            return anyio.from_thread.run(self._forward, tool, arguments, key)

        call = functools.partial(
            perform, self.ledger, asked, forward, self.policy_of,
            self.config.declarations.agent, self.config.lease_wait,
        )  # fmt: skip
        result = await anyio.to_thread.run_sync(call)
        if result is NO_RESULT:  # a person's "done, nothing to return"
            text = "oncelog: a person recorded this call as done; it returned nothing to show"
            return types.CallToolResult(content=[types.TextContent(text=text)])
        return types.CallToolResult.model_validate(result)

    async def _forward(self, tool: str, arguments: Any, key: str) -> Any:
        upstream = self.upstreams[self.tools[tool][0]]
        meta = cast(types.RequestParamsMeta, {KEY_META: key})
        result = await upstream.call_tool(tool, arguments, meta)
        return result.model_dump(mode="json", by_alias=True, exclude_none=True)

    def _claims(self, caller: Caller, asked: Asked) -> dict[str, Any]:
        return {"client": caller.client.name, "run": asked.run_id, "step": asked.step_id,
                "tool": asked.tool, "args": asked.digest}  # fmt: skip

    async def _waiting(
        self, caller: Caller, asked: Asked, exc: ApprovalRequired
    ) -> types.CallToolResult | types.InputRequiredResult:
        if exc.step_id != asked.step_id:
            return _error(
                f"oncelog: run {asked.run_id!r} waits for a person's approval of step "
                f"{exc.step_id!r} ({exc.message}); its other calls wait with it"
            )
        approvals = await anyio.to_thread.run_sync(
            functools.partial(self.ledger.approvals, "pending", limit=1000)
        )
        found = [a for a in approvals if (a.run_id, a.step_id) == (asked.run_id, asked.step_id)]
        signer = self.ledger.notices.signer
        if not found or signer is None:
            return _error(
                f"oncelog: {exc.message}. No console address is configured for a decision "
                f"link (console_url, $ONCELOG_CONSOLE_URL): a person runs oncelog approve "
                f"{asked.run_id} {asked.step_id!r}; then call this tool again."
            )
        request = max(found, key=lambda a: a.id)
        url = signer.links("approval", asked.run_id, asked.step_id, request.id, request.args_hash)
        state = self.seal.seal({**self._claims(caller, asked), "request": request.id})
        elicit = types.ElicitRequest(
            params=types.ElicitRequestURLParams(
                message=(
                    f"A person must approve {asked.tool} in run {asked.run_id} (step "
                    f"{asked.step_id}) with exactly these arguments before it runs. Open the "
                    f"page to approve (to deny: {url['deny']}); then the client calls again "
                    "with the requestState."
                ),
                url=url["approve"],
                elicitation_id=f"oncelog-approval-{request.id}",
            )
        )
        return types.InputRequiredResult(input_requests={APPROVAL_INPUT: elicit},
                                         request_state=state)  # fmt: skip

    async def answered(self, asked: Asked) -> tuple[bool, Any]:
        """Whether the ledger already holds the call's result: its ``requestState`` is
        then spent."""
        return await anyio.to_thread.run_sync(recorded, self.ledger, asked)


def _caller() -> Caller:
    caller = CALLER.get()
    if caller is None:  # only the Guard calls into the MCP app
        raise MCPError(INVALID_PARAMS, "oncelog: no client")
    return caller


def _error(text: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(text=text)], is_error=True)


def app(gateway: Gateway) -> Guard:
    """The ASGI application: the guard in front of the stateless MCP endpoint ``/mcp``."""
    server: Server[Any] = Server(
        "oncelog-gateway", on_list_tools=gateway.list_tools, on_call_tool=gateway.call_tool
    )
    inner = server.streamable_http_app(
        stateless_http=True, json_response=True,
        max_request_body_size=gateway.config.max_body_bytes,
        transport_security=_no_host_check(),
    )  # fmt: skip
    config = gateway.config
    return Guard(
        inner, config.clients, config.allowed_origins, config.max_body_bytes, config.body_seconds
    )


def _no_host_check() -> Any:
    # The Guard checks Origin itself against allowed_origins; the Host check of the mcp
    # package would refuse a gateway reached by any name but localhost.
    from mcp.server.transport_security import TransportSecuritySettings

    return TransportSecuritySettings(enable_dns_rebinding_protection=False)


async def serve(ledger: Ledger, config: GatewayConfig, host: str, port: int) -> None:
    """Connect to the upstreams, learn their tools, and serve until SIGTERM or SIGINT."""
    failed: Exception | None = None
    async with anyio.create_task_group() as links:
        upstreams = {name: UpstreamLink(u, links) for name, u in config.upstreams.items()}
        try:
            await _serve(Gateway(ledger, config, upstreams), host, port)
        except Exception as exc:  # raised below, not wrapped in the task group's group
            failed = exc
        finally:
            for link in upstreams.values():
                link.close()
    if failed is not None:
        raise failed


async def _serve(gateway: Gateway, host: str, port: int) -> None:
    await gateway.learn_tools()
    http = uvicorn.Server(
        uvicorn.Config(
            app(gateway), host=host, port=port, log_level="warning", timeout_keep_alive=5,
            h11_max_incomplete_event_size=64 * 1024,
        )
    )  # fmt: skip

    async def announce() -> None:
        while not http.started:
            await anyio.sleep(0.02)
        shown = f"[{host}]" if ":" in host else host
        print(f"oncelog gateway listening on http://{shown}:{port}/mcp", flush=True)

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(announce)
        await http.serve()
        tasks.cancel_scope.cancel()
