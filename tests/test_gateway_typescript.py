"""A TypeScript agent (the official MCP SDK, ``@modelcontextprotocol/client``, protocol
2026-07-28 over Streamable HTTP) calling tools through ``oncelog gateway``: each call is
performed once at the upstream, counted there (its count file), never from the ledger.

Real processes: the counting upstream (``tests/support/mcp_counting_upstream.py``), the
gateway (``python -m oncelog gateway``), and Node running ``tests/gateway_clients/ts/``
installed by ``npm ci`` from its lock. A gateway dies by SIGKILL at a named crash point
while the upstream is performing the call; the TypeScript client re-issues the call under
a new request id, as the specification says, to a restarted gateway or to another replica.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx2 as httpx
import pytest

from oncelog.testing import CRASH_POINTS

from .conftest import require
from .support.announced_process import ROOT, Announced
from .support.gateway import (
    OTHER_TOKEN,
    TOKEN,
    Upstream,
    counting_upstream,
    free_port,
    gateway_config,
)
from .support.launch import environment, python
from .support.postgres import POSTGRES_REASON, fresh_schema, postgres_is_up
from .support.ts_clients import (
    NODE_REASON,
    InstallFailed,
    NodeClient,
    installed,
    node_is_usable,
    outcome,
)

# Replicas on one PostgreSQL ledger share the secret that signs decision links and
# requestStates (a SQLite ledger keeps its own in a file beside it).
LINK_SECRET = "ts-link-secret-" + "5e" * 24
GATEWAY_READY = "oncelog gateway listening on "
REFUND = {"order_id": 42, "amount": 1250}
CSRF = re.compile(r'name="csrf" value="([^"]+)"')


@pytest.fixture(scope="module")
def ts_folder() -> Path:
    require(node_is_usable(), NODE_REASON)
    try:
        return installed()
    except InstallFailed as failed:  # the npm registry out of reach, say
        require(False, str(failed))
        raise


class Gateways:
    """Gateway processes on one config (``tests/support/gateway.py``'s, with a console
    address for the decision links) and one ledger; each on its own port, or on the port
    of one it replaces."""

    def __init__(self, folder: Path, ledger: str, upstream: Upstream) -> None:
        self.ledger = ledger
        self.folder = folder
        # Where a decision link points: a console a test starts there when it follows one.
        self.console_url = f"http://127.0.0.1:{free_port()}"
        self.config = gateway_config(folder, upstream, console_url=self.console_url)
        self.started: list[Announced] = []

    def start(self, port: int | None = None, crash_at: str | None = None) -> tuple[Announced, str]:
        port = port or free_port()
        argv = python("-m", "oncelog", "gateway", "--config", str(self.config),
                      "--listen", f"127.0.0.1:{port}", "--ledger", self.ledger)  # fmt: skip
        env = environment(
            crash_at, GATEWAY_TEST_TOKEN=TOKEN, GATEWAY_OTHER_TOKEN=OTHER_TOKEN,
            ONCELOG_LINK_SECRET=LINK_SECRET,
        )  # fmt: skip
        gateway = Announced(argv, GATEWAY_READY, env=env)
        self.started.append(gateway)
        return gateway, f"http://127.0.0.1:{port}/mcp"

    def console(self) -> Announced:
        """``oncelog console`` on the ledger, at the address the links name."""
        port = self.console_url.rsplit(":", 1)[1]
        argv = python("-m", "oncelog", "console", "--port", port, "--db", self.ledger,
                      "--token-file", str(self.folder / "console-token"))  # fmt: skip
        env = environment(ONCELOG_LINK_SECRET=LINK_SECRET)
        console = Announced(argv, "oncelog console on ", env=env)
        self.started.append(console)
        return console

    def stop_all(self) -> None:
        for process in self.started:
            process.kill()


@pytest.fixture
def upstream(tmp_path: Path) -> Iterator[Upstream]:
    # dedupe: a provider that performs a key once (as Stripe does within its window), so
    # that an attempt the gateway sends again after its own death, with the same key, is
    # answered there instead of performed twice.
    with counting_upstream(tmp_path, dedupe=True) as running:
        yield running


@pytest.fixture
def ledger_url(tmp_path: Path) -> str:
    return str(tmp_path / "ledger.db")


@pytest.fixture
def gateways(tmp_path: Path, ledger_url: str, upstream: Upstream) -> Iterator[Gateways]:
    started = Gateways(tmp_path, ledger_url, upstream)
    yield started
    started.stop_all()


@pytest.fixture
def ts_call(ts_folder: Path) -> Iterator[Callable[..., NodeClient]]:
    clients: list[NodeClient] = []

    def call(urls: list[str], tool: str, arguments: dict[str, Any], **spec: Any) -> NodeClient:
        spec = {"urls": urls, "token": TOKEN, "tool": tool, "arguments": arguments, **spec}
        client = NodeClient(ts_folder, "call.mjs", spec)
        clients.append(client)
        return client

    yield call
    for client in clients:
        client.kill()


def tools_calls_sent(client: NodeClient) -> list[dict[str, Any]]:
    """The ``tools/call`` requests the client sent: their JSON-RPC ids and URLs."""
    return [e for e in client.events if e["event"] == "sent" and e["method"] == "tools/call"]


def text_of(result: dict[str, Any]) -> str:
    return "".join(block.get("text", "") for block in result.get("content", []))


def test_a_call_is_performed_once_and_its_repeat_answered_from_the_ledger(
    gateways: Gateways, upstream: Upstream, ts_call: Callable[..., NodeClient]
) -> None:
    _, url = gateways.start()
    first = outcome(ts_call([url], "refund", REFUND, run="ticket-1", callId="call_a").finish())
    assert first["event"] == "result", first
    assert not first["result"].get("isError"), first
    again = outcome(ts_call([url], "refund", REFUND, run="ticket-1", callId="call_a").finish())
    assert text_of(again["result"]) == text_of(first["result"])
    assert upstream.performed("refund") == 1
    [received] = upstream.received("refund")
    assert received["key"], "the idempotency key reached the upstream in _meta"


@pytest.mark.parametrize("point", CRASH_POINTS)
def test_a_gateway_killed_mid_call_and_restarted_performs_the_reissued_call_once(
    gateways: Gateways, upstream: Upstream, ts_call: Callable[..., NodeClient], point: str
) -> None:
    port = free_port()
    dying, url = gateways.start(port, crash_at=point)
    client = ts_call([url], "refund", REFUND, run="ticket-2", callId="call_b", retryFor=60)
    client.wait_for("error")  # the stream broke: the gateway died mid-call
    assert dying.wait_dead() == -9
    gateways.start(port)  # the same address, a new process, the same ledger
    answer = outcome(client.finish())
    assert answer["event"] == "result", client.events
    ids = [e["id"] for e in tools_calls_sent(client)]
    assert len(ids) >= 2, client.events  # re-issued ...
    assert len(set(ids)) == len(ids), ids  # ... each time as a new request, with a new id
    assert upstream.performed("refund") == 1, answer


def test_two_replicas_on_postgres_a_call_reissued_to_the_other_after_a_kill_is_performed_once(
    tmp_path: Path, upstream: Upstream, ts_call: Callable[..., NodeClient]
) -> None:
    require(postgres_is_up(), POSTGRES_REASON)
    with fresh_schema() as pg_url:
        replicas = Gateways(tmp_path, pg_url, upstream)
        try:
            first, first_url = replicas.start(crash_at="after_call")
            _, second_url = replicas.start()
            client = ts_call([first_url, second_url], "refund", REFUND, run="ticket-3",
                             callId="call_c", retryFor=60)  # fmt: skip
            assert first.wait_dead() == -9
            answer = outcome(client.finish())
            assert answer["event"] == "result", client.events
            sent = tools_calls_sent(client)
            assert {e["url"] for e in sent} == {first_url, second_url}, client.events
            assert len({e["id"] for e in sent}) == len(sent)  # a new request id each time
            assert upstream.performed("refund") == 1
        finally:
            replicas.stop_all()


@pytest.mark.parametrize("token", [None, "not-the-token"])
def test_a_client_without_a_good_token_is_refused_and_nothing_is_performed(
    gateways: Gateways, upstream: Upstream, ts_call: Callable[..., NodeClient], token: str | None
) -> None:
    _, url = gateways.start()
    events = ts_call([url], "refund", REFUND, run="ticket-4", callId="call_d", token=token).finish()
    refused = outcome(events)
    assert refused["event"] == "error", events
    assert "HTTP 401" in refused["message"], refused
    assert upstream.performed() == 0


def oncelog_cli(ledger: str, *args: str) -> str:
    done = subprocess.run(
        python("-m", "oncelog", *args, "--db", ledger), capture_output=True, text=True,
        timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def approve_pending(ledger: str, run: str) -> None:
    """A person approves the one request waiting in ``run``, by the CLI."""
    [pending] = [a for a in json.loads(oncelog_cli(ledger, "approvals", "--json"))
                 if a["run_id"] == run]  # fmt: skip
    oncelog_cli(ledger, "approve", run, pending["step_id"], "--request",
                str(pending["id"]), "--by", "ada")  # fmt: skip


def url_elicitation(result_or_params: dict[str, Any]) -> dict[str, Any]:
    """The URL-mode elicitation of an ``input_required`` result (or of the SDK's handler)."""
    if "inputRequests" not in result_or_params:
        return result_or_params
    [request] = result_or_params["inputRequests"].values()
    assert request["method"] == "elicitation/create", request
    return dict(request["params"])


def approve_by_link(link: str, console_url: str) -> None:
    """A person opens the elicitation's URL (the console's signed decision page) and
    confirms, as the page's form does: its CSRF token, the console's origin, a name."""
    with httpx.Client(timeout=30) as person:
        page = person.get(link)
        assert page.status_code == 200, page.text
        csrf = CSRF.search(page.text)
        assert csrf is not None, page.text
        confirmed = person.post(
            link, headers={"Origin": console_url},
            data={"csrf": csrf.group(1), "decision": "approve", "by": "ada"},
        )  # fmt: skip
        assert confirmed.status_code == 200, confirmed.text


@pytest.mark.parametrize("decided_by", ["cli", "link"])
def test_an_approval_by_url_then_the_sdk_s_retry_with_request_state_performs_it_once(
    gateways: Gateways,
    upstream: Upstream,
    ledger_url: str,
    ts_call: Callable[..., NodeClient],
    decided_by: str,
) -> None:
    _, url = gateways.start()
    client = ts_call([url], "delete_account", {"customer": "cus_7"}, run="ticket-5",
                     callId="call_e", approve="stdin")  # fmt: skip
    asked = client.wait_for("elicitation")["params"]
    assert asked["mode"] == "url", asked  # never an in-band accept the client could forge
    assert asked["url"].startswith(gateways.console_url + "/link/"), asked
    assert upstream.performed() == 0
    if decided_by == "cli":
        approve_pending(ledger_url, "ticket-5")
    else:
        gateways.console()
        approve_by_link(asked["url"], gateways.console_url)
    client.say("accept")  # the person is done at the URL: the SDK retries with requestState
    answer = outcome(client.finish())
    assert answer["event"] == "result", client.events
    assert not answer["result"].get("isError"), answer
    assert upstream.performed("delete_account") == 1


def test_an_accept_without_a_decision_performs_nothing(
    gateways: Gateways, upstream: Upstream, ts_call: Callable[..., NodeClient]
) -> None:
    """The client answers the elicitation "accept" at once, with no person having decided:
    a forged approval. The retried call still waits; nothing is performed."""
    _, url = gateways.start()
    client = ts_call([url], "delete_account", {"customer": "cus_8"}, run="ticket-6",
                     callId="call_f", approve="stdin")  # fmt: skip
    client.wait_for("elicitation")
    client.say("accept")
    again = client.wait_for("elicitation")  # asked again: the retry found no decision
    assert again["params"]["mode"] == "url"
    client.kill()
    assert upstream.performed() == 0


def test_a_replayed_request_state_performs_nothing_more_and_is_refused_for_another_call(
    gateways: Gateways,
    upstream: Upstream,
    ledger_url: str,
    ts_call: Callable[..., NodeClient],
) -> None:
    """The SDK's manual path: the input_required result, a person's approval, the retry
    with its requestState. The same state sent again is refused (good once), and the call
    without it reads the recorded answer; sent with other arguments, in another run or
    under another call name, it is refused; nothing is performed a second time."""
    _, url = gateways.start()
    call = {"run": "ticket-7", "callId": "call_g"}
    arguments = {"customer": "cus_9"}
    first = outcome(ts_call([url], "delete_account", arguments, approve="manual", **call).finish())
    assert first["result"]["resultType"] == "input_required", first
    state = first["result"]["requestState"]
    [key] = first["result"]["inputRequests"]
    assert url_elicitation(first["result"])["mode"] == "url"
    approve_pending(ledger_url, "ticket-7")
    retry = {"requestState": state, "inputResponses": {key: {"action": "accept"}}}
    done = outcome(ts_call([url], "delete_account", arguments, **retry, **call).finish())
    assert done["event"] == "result", done
    assert not done["result"].get("isError"), done
    replayed = outcome(ts_call([url], "delete_account", arguments, **retry, **call).finish())
    assert replayed["event"] == "error", replayed
    assert "requestState already used" in json.dumps(replayed), replayed
    read = outcome(ts_call([url], "delete_account", arguments, **call).finish())
    assert text_of(read["result"]) == text_of(done["result"])
    assert upstream.performed("delete_account") == 1
    elsewhere = [
        ({"customer": "cus_10"}, call),
        (arguments, {"run": "ticket-8", "callId": "call_g"}),
        (arguments, {"run": "ticket-7", "callId": "call_h"}),
    ]
    for other_arguments, other_call in elsewhere:
        sent = ts_call([url], "delete_account", other_arguments, **retry, **other_call)
        refused = outcome(sent.finish())
        assert refused["event"] == "error" or refused["result"].get("isError"), refused
        assert "requestState" in json.dumps(refused), refused
    assert upstream.performed("delete_account") == 1


PAGE = ROOT / "docs" / "integrations" / "gateway-typescript.md"
FILE_MARK = re.compile(r"<!-- file: (\S+) -->")
PRINTS = re.compile(r"^(?P<command>.*?)\s+# prints: (?P<printed>\S+)")


def page_blocks() -> list[tuple[str, str, str]]:
    """The page's fenced blocks: (language, the line before, the code)."""
    lines = PAGE.read_text().splitlines()
    found = []
    for number, line in enumerate(lines):
        if line.startswith("```") and line.strip() != "```":
            end = lines.index("```", number + 1)
            found.append((line[3:].strip(), lines[number - 1], "\n".join(lines[number + 1 : end])))
    return found


def extras() -> list[str]:
    """The extras pyproject.toml declares (read as text: tomllib is Python 3.11's)."""
    section = (ROOT / "pyproject.toml").read_text().split("[project.optional-dependencies]")[1]
    return re.findall(r"^([\w-]+) = \[", section.split("\n[")[0], re.M)


def pinned_installs(command: str) -> dict[str, str]:
    """The packages an ``npm install`` line of the page names, with their versions."""
    return dict(spec.rsplit("@", 1) for spec in command.split()[2:])


def test_the_typescript_page_runs_as_written(tmp_path: Path, ts_folder: Path) -> None:
    """The page's files are written as it shows them and its commands run in order, in a
    folder laid out as the page's checkout (the example server beside the agent's folder):
    every email is counted in the server's outbox. Installs are checked, not run again: the
    npm versions are the ones tests/gateway_clients/ts pins, and the extra exists."""
    (tmp_path / "examples" / "mcp").mkdir(parents=True)
    (tmp_path / "examples" / "mcp" / "server.py").symlink_to(ROOT / "examples/mcp/server.py")
    folder = tmp_path / "agent"
    pinned = json.loads((ROOT / "tests/gateway_clients/ts/package.json").read_text())
    env = environment(PATH=f"{Path(python()[0]).parent}:{os.environ['PATH']}")
    port = free_port()
    env["ONCELOG_GATEWAY_URL"] = f"http://127.0.0.1:{port}/mcp"
    gateways: list[Announced] = []
    ran = []
    try:
        for language, before, code in page_blocks():
            named = FILE_MARK.fullmatch(before.strip())
            if named:
                (folder / named.group(1)).write_text(code + "\n")
                continue
            if language != "sh":
                continue
            for line in code.splitlines():
                command, _, _ = line.partition("  #")
                command = command.strip()
                words = command.split()
                if words[:2] == ["pip", "install"]:
                    assert words[2] == "'.[gateway]'"
                    assert "gateway" in extras()
                elif command == "mkdir agent && cd agent":
                    folder.mkdir()
                    (folder / "node_modules").symlink_to(ts_folder / "node_modules")
                elif words[:2] == ["npm", "install"]:
                    assert pinned_installs(command) == pinned["dependencies"]
                elif words[0] == "export":
                    name, _, value = words[1].partition("=")
                    env[name] = value
                elif words[:2] == ["oncelog", "gateway"]:
                    argv = python("-m", "oncelog", *words[1:-1], "--listen", f"127.0.0.1:{port}",
                                  "--ledger", str(tmp_path / "ledger.db"))  # fmt: skip
                    gateways.append(Announced(argv, GATEWAY_READY, cwd=folder, env=env))
                else:
                    expected = PRINTS.match(line)
                    assert expected, f"a command the test does not know how to run: {line}"
                    done = subprocess.run(
                        ["bash", "-c", expected["command"]], cwd=folder, env=env,
                        capture_output=True, text=True, timeout=120, check=False,
                    )  # fmt: skip
                    assert done.returncode == 0, done.stdout + done.stderr
                    assert done.stdout.split() == [expected["printed"]], (line, done.stdout)
                    ran.append(expected["command"])
    finally:
        for gateway in gateways:
            gateway.kill()
    assert len(gateways) == 1
    assert sum(c.startswith("node ") for c in ran) == 4
    assert len((folder / "outbox.jsonl").read_text().splitlines()) == 2
    shown = oncelog_cli(str(tmp_path / "ledger.db"), "show", "ticket-4711")
    assert re.search(r"send_email/email-1\s.*done", shown), shown  # as the page says


def test_the_ai_sdk_client_fails_a_call_that_waits_for_approval_and_runs_it_once_approved(
    gateways: Gateways, upstream: Upstream, ledger_url: str, ts_folder: Path
) -> None:
    """As docs/integrations/gateway-typescript.md says: the AI SDK's client handles form
    elicitations only, so the approval's URL elicitation fails the call (nothing
    performed); once a person approved, the agent's next call of it runs, once."""
    _, url = gateways.start()
    spec = {"url": url, "token": TOKEN, "run": "ticket-9", "tool": "delete_account",
            "arguments": {"customer": "cus_11"}}  # fmt: skip

    def ai_sdk_call() -> dict[str, Any]:
        return outcome(NodeClient(ts_folder, "ai_sdk_call.mjs", spec).finish())

    waiting = ai_sdk_call()
    assert waiting["event"] == "error", waiting
    assert waiting["name"] == "MCPClientError", waiting
    assert upstream.performed() == 0
    approve_pending(ledger_url, "ticket-9")
    for _ in range(2):  # approved: performed; asked again: the recorded answer
        done = ai_sdk_call()
        assert done["event"] == "result", done
        assert not done["result"].get("isError"), done
    assert upstream.performed("delete_account") == 1
