"""The Stripe probe against localstripe, a Stripe-compatible server the tests start.

Nothing here is mocked: payments are made with the official ``stripe`` client over HTTP
at a real localstripe process, and counted from localstripe's own list of
PaymentIntents with plain HTTP, not through the code under test. The end-to-end tests
SIGKILL a real agent process at oncelog's crash points and restart it.

localstripe ignores ``Idempotency-Key`` (two creates with one key make two
PaymentIntents). That lets a test make the duplicate a probe must refuse to settle, and
makes the end-to-end tests stricter than real Stripe would: a second charge would show
up here even where Stripe's key would have absorbed it.
"""

from __future__ import annotations

import importlib
import json
import selectors
import signal
import subprocess
import sys
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, replace
from datetime import timedelta
from importlib.util import find_spec
from pathlib import Path
from typing import Any

import pytest

import oncelog
from oncelog import providers
from tests.conftest import require

from .support.launch import environment, python

HAVE_CLIENTS = find_spec("stripe") is not None and find_spec("localstripe") is not None
if HAVE_CLIENTS:
    import stripe

    from oncelog.probes.stripe import (
        METADATA_KEY,
        PaymentFinder,
        create_payment,
        find_payment,
        payment_tool,
    )

AGENTS = Path(__file__).parent / "stripe_agents"
SERVER_SCRIPT = AGENTS / "localstripe_server.py"
AGENT_SCRIPT = AGENTS / "payment_agent.py"
API_KEY = "sk_test_oncelog"
CARD = "pm_card_visa"  # Stripe's test card, which localstripe knows too
DECLINED_CARD = "pm_card_chargeCustomerFail"  # attaches, then every charge is declined
STARTUP_TIMEOUT = 30.0
AGENT_TIMEOUT = 60.0


@dataclass
class LocalStripe:
    """A running localstripe; ``stop`` kills and reaps it."""

    process: subprocess.Popen[str]
    url: str

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if self.process.stdout is not None:
            self.process.stdout.close()


def start_localstripe(log: Path) -> LocalStripe:
    """Start a server and wait for the port it prints once it listens."""
    with log.open("w") as stderr:  # the child holds its own copy of the descriptor
        process = subprocess.Popen(
            python(str(SERVER_SCRIPT)), stdout=subprocess.PIPE, stderr=stderr, text=True
        )
    assert process.stdout is not None
    with selectors.DefaultSelector() as selector:
        selector.register(process.stdout, selectors.EVENT_READ)
        ready = selector.select(timeout=STARTUP_TIMEOUT)
    port = process.stdout.readline().strip() if ready else ""
    server = LocalStripe(process, f"http://127.0.0.1:{port}")
    if not port.isdigit():
        server.stop()
        raise AssertionError(f"localstripe did not start: {log.read_text()[-2000:]}")
    return server


@pytest.fixture(scope="module")
def localstripe(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStripe]:
    require(HAVE_CLIENTS, "needs stripe and localstripe: pip install '.[stripe]' localstripe")
    server = start_localstripe(tmp_path_factory.mktemp("localstripe") / "server.log")
    yield server
    server.stop()


def client_for(url: str) -> stripe.StripeClient:
    # No retries: a test of a server that is down should not wait for backoffs.
    return stripe.StripeClient(API_KEY, base_addresses={"api": url}, max_network_retries=0)


@pytest.fixture(scope="module")
def client(localstripe: LocalStripe) -> stripe.StripeClient:
    return client_for(localstripe.url)


@pytest.fixture
def customer(client: stripe.StripeClient) -> str:
    return client.v1.customers.create(params={"email": "buyer@example.com"}).id


def payments_with_key(url: str, key: str) -> list[dict[str, Any]]:
    """The PaymentIntents localstripe holds with ``key`` in their metadata, read with
    plain HTTP page by page: the provider's own record, independent of the probe."""
    return [intent for intent in all_payments(url) if intent["metadata"].get(METADATA_KEY) == key]


def payments_of(url: str, customer: str) -> list[dict[str, Any]]:
    """The same record, by customer: it counts payments made without the key too."""
    return [intent for intent in all_payments(url) if intent["customer"] == customer]


def all_payments(url: str) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    query: dict[str, str] = {"limit": "100"}
    while True:
        request = urllib.request.Request(
            f"{url}/v1/payment_intents?{urllib.parse.urlencode(query)}",
            headers={"Authorization": f"Bearer {API_KEY}"},
        )
        with urllib.request.urlopen(request, timeout=30) as response:
            page = json.loads(response.read())
        found += page["data"]
        if not page["has_more"]:
            return found
        query["starting_after"] = page["data"][-1]["id"]


def pay(client: stripe.StripeClient, customer: str, key: str, card: str = CARD) -> dict[str, Any]:
    return create_payment(
        500,
        "eur",
        customer,
        idempotency_key=key,
        client=client,
        payment_method=card,
        payment_method_types=["card"],
        confirm=True,
    )


def test_import_without_stripe_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "stripe", None)  # what an absent package looks like
    monkeypatch.delitem(sys.modules, "oncelog.probes.stripe", raising=False)
    importlib.import_module("oncelog.probes")  # the package itself needs no client
    with pytest.raises(ImportError, match=r"pip install .*\[stripe\]"):
        importlib.import_module("oncelog.probes.stripe")


def test_a_payment_is_found_with_what_create_returned(
    localstripe: LocalStripe, client: stripe.StripeClient, customer: str
) -> None:
    created = pay(client, customer, "ol1_found")
    [at_provider] = payments_with_key(localstripe.url, "ol1_found")
    assert created["id"] == at_provider["id"]
    assert created["status"] == "succeeded"
    assert created["metadata"][METADATA_KEY] == "ol1_found"
    assert "client_secret" not in created
    answer = PaymentFinder(client)("ol1_found", customer, 500, CARD)
    assert answer == oncelog.Found(created)


def test_no_payment_with_the_key_is_not_found_only_by_the_probe_of_its_tool(
    localstripe: LocalStripe, client: stripe.StripeClient, customer: str
) -> None:
    """Declared with ``create_payment`` by ``payment_tool``, the probe knows every payment
    of its tool carries the key; declared apart, it cannot know, and cannot tell."""
    pay(client, customer, "ol1_someone_else")  # the list is not empty
    assert payments_with_key(localstripe.url, "ol1_never_paid") == []
    charge = payment_tool(name="charge", finder=PaymentFinder(client))
    assert charge.spec.probe is not None
    assert charge.spec.probe("ol1_never_paid", 500, "eur") is oncelog.NOT_FOUND
    assert PaymentFinder(client)("ol1_never_paid") is oncelog.CANNOT_TELL
    assert PaymentFinder(client).preflight("ol1_never_paid") is oncelog.NOT_FOUND


def test_two_payments_with_one_key_cannot_tell(
    localstripe: LocalStripe, client: stripe.StripeClient, customer: str
) -> None:
    first = pay(client, customer, "ol1_twice")
    second = pay(client, customer, "ol1_twice")  # localstripe does not deduplicate by key
    at_provider = {intent["id"] for intent in payments_with_key(localstripe.url, "ol1_twice")}
    assert at_provider == {first["id"], second["id"]}
    assert PaymentFinder(client)("ol1_twice") is oncelog.CANNOT_TELL


def test_a_declined_payment_cannot_tell(
    localstripe: LocalStripe, client: stripe.StripeClient, customer: str
) -> None:
    with pytest.raises(stripe.CardError):
        pay(client, customer, "ol1_declined", card=DECLINED_CARD)
    [at_provider] = payments_with_key(localstripe.url, "ol1_declined")
    assert at_provider["status"] == "requires_payment_method"
    assert PaymentFinder(client)("ol1_declined") is oncelog.CANNOT_TELL


def test_the_preflight_is_the_same_lookup(
    localstripe: LocalStripe, client: stripe.StripeClient, customer: str
) -> None:
    finder = PaymentFinder(client)
    created = pay(client, customer, "ol1_pre_found")
    assert finder.preflight("ol1_pre_found", customer, 500, CARD) == oncelog.Found(created)
    assert finder.preflight("ol1_pre_never") is oncelog.NOT_FOUND
    with pytest.raises(stripe.CardError):
        pay(client, customer, "ol1_pre_declined", card=DECLINED_CARD)
    assert finder.preflight("ol1_pre_declined") is oncelog.NOT_FOUND  # calling is refused
    pay(client, customer, "ol1_pre_twice")
    pay(client, customer, "ol1_pre_twice")
    conflict = finder.preflight("ol1_pre_twice")
    assert isinstance(conflict, oncelog.Conflict)
    assert "2 PaymentIntents carry the key ol1_pre_twice" in conflict.reason
    down = PaymentFinder(client_for("http://127.0.0.1:9"))
    assert down.preflight("ol1_pre_found") is oncelog.CANNOT_TELL


def test_every_page_is_read_and_too_many_cannot_tell(
    localstripe: LocalStripe, client: stripe.StripeClient, customer: str
) -> None:
    pay(client, customer, "ol1_paged")
    pay(client, customer, "ol1_after_paged")
    total = len(client.v1.payment_intents.list(params={"limit": 100}).data)
    assert 2 <= total < 100  # one page of 100 holds them all: ``total`` is exact
    # One PaymentIntent per page: the key is found only if the pages are followed, and a
    # match on an early page does not end the search (a duplicate may come later).
    assert isinstance(
        PaymentFinder(client, page_size=1, max_pages=total)("ol1_paged"), oncelog.Found
    )
    short = PaymentFinder(client, page_size=1, max_pages=total - 1)
    assert short("ol1_paged") is oncelog.CANNOT_TELL
    assert short("ol1_never_paid") is oncelog.CANNOT_TELL


def test_a_server_that_is_down_cannot_tell(tmp_path: Path, localstripe: LocalStripe) -> None:
    # ``localstripe`` only checks the packages are there; this test needs its own server.
    server = start_localstripe(tmp_path / "server.log")
    try:
        down = client_for(server.url)
        customer = down.v1.customers.create(params={"email": "buyer@example.com"}).id
        pay(down, customer, "ol1_down")
        assert isinstance(PaymentFinder(down)("ol1_down"), oncelog.Found)
    finally:
        server.stop()
    assert PaymentFinder(down)("ol1_down") is oncelog.CANNOT_TELL


def test_a_window_the_server_cannot_filter_cannot_tell(
    client: stripe.StripeClient, customer: str
) -> None:
    """localstripe refuses ``created[gte]`` on PaymentIntents; the probe must not read
    that as an empty list. (The window itself needs real Stripe to be exercised.)"""
    pay(client, customer, "ol1_window")
    assert PaymentFinder(client)("ol1_window") != oncelog.CANNOT_TELL
    window = PaymentFinder(client, lookback=timedelta(hours=25))
    assert window("ol1_window") is oncelog.CANNOT_TELL
    assert window("ol1_never_paid") is oncelog.CANNOT_TELL


def test_find_payment_reads_the_global_stripe_settings(
    monkeypatch: pytest.MonkeyPatch,
    localstripe: LocalStripe,
    client: stripe.StripeClient,
    customer: str,
) -> None:
    created = pay(client, customer, "ol1_global")
    monkeypatch.setattr(stripe, "api_key", None)
    with pytest.raises(oncelog.ConfigurationError, match=r"stripe\.api_key"):
        find_payment("ol1_global")
    monkeypatch.setattr(stripe, "api_key", API_KEY)
    monkeypatch.setattr(stripe, "api_base", localstripe.url)
    assert find_payment("ol1_global", customer, 500) == oncelog.Found(created)


def test_the_payment_tool_takes_stripes_window_from_its_provider() -> None:
    """``oncelog.providers.stripe`` is the one source of the window: the tool takes it,
    a shorter one of its own wins, a longer one is refused as for any Stripe tool."""
    require(HAVE_CLIENTS, "needs stripe and localstripe: pip install '.[stripe]' localstripe")
    published = providers.stripe.dedupe_window
    assert published is not None
    assert payment_tool(name="charge").spec.dedupe_window == published.total_seconds()
    assert payment_tool(name="charge", dedupe_window=600).spec.dedupe_window == 600
    with pytest.raises(oncelog.ConfigurationError, match="longer than Stripe's published"):
        payment_tool(name="charge", dedupe_window=published + timedelta(hours=1))


def test_the_metadata_key_is_reserved(
    localstripe: LocalStripe, client: stripe.StripeClient, customer: str
) -> None:
    with pytest.raises(oncelog.ConfigurationError, match=METADATA_KEY):
        create_payment(
            500,
            "eur",
            customer,
            idempotency_key="ol1_mine",
            client=client,
            metadata={METADATA_KEY: "ol1_theirs", "order": "42"},
        )
    assert payments_with_key(localstripe.url, "ol1_mine") == []
    assert payments_with_key(localstripe.url, "ol1_theirs") == []
    kept = create_payment(
        500, "eur", customer, idempotency_key="ol1_mine", client=client, metadata={"order": "42"}
    )
    assert kept["metadata"] == {"order": "42", METADATA_KEY: "ol1_mine"}


# --- end to end: a real agent process, killed at a crash point and restarted ---------


@dataclass(frozen=True)
class AgentExit:
    returncode: int
    stdout: str
    stderr: str

    def __str__(self) -> str:
        return f"exit {self.returncode}; stdout {self.stdout!r}; stderr {self.stderr[-2000:]!r}"


@dataclass(frozen=True)
class PaymentAgent:
    """One run of ``stripe_agents/payment_agent.py``, started as often as a test wants."""

    ledger: Path
    run_id: str
    customer: str
    key_namespace: str = ""
    direct: bool = False

    def start(self, stripe_url: str, crash_at: str | None = None) -> AgentExit:
        env = environment(crash_at, ONCELOG_KEY_NAMESPACE=self.key_namespace)
        argv = python(str(AGENT_SCRIPT), "--ledger", str(self.ledger))
        argv += ["--run", self.run_id, "--stripe", stripe_url, "--customer", self.customer]
        argv += ["--card", CARD, *(["--direct"] if self.direct else [])]
        with subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
        ) as process:
            try:
                stdout, stderr = process.communicate(timeout=AGENT_TIMEOUT)
            except subprocess.TimeoutExpired:
                process.kill()
                stdout, stderr = process.communicate()
                raise AssertionError(f"the agent hung: {stderr[-2000:]}") from None
        return AgentExit(process.returncode, stdout, stderr)

    def charge_step(self) -> oncelog.StepRecord:
        with oncelog.open(str(self.ledger)) as ledger:
            [step] = [step for step in ledger.steps(self.run_id) if step.step_id == "charge"]
        return step

    def run_status(self) -> oncelog.RunStatus:
        with oncelog.open(str(self.ledger)) as ledger:
            return ledger.get_run(self.run_id).status


@pytest.fixture
def agent(tmp_path: Path, customer: str) -> PaymentAgent:
    return PaymentAgent(tmp_path / "ledger.db", f"order-{tmp_path.name}", customer)


def crash(agent: PaymentAgent, url: str, point: str) -> oncelog.StepRecord:
    """Kill the agent at ``point`` of the charge; the charge is then in doubt."""
    killed = agent.start(url, crash_at=f"{point}@charge")
    assert killed.returncode == -signal.SIGKILL, killed
    step = agent.charge_step()
    assert (step.state, step.attempts) == (oncelog.StepState.IN_FLIGHT, 1)
    return step


def test_charged_then_killed_is_found_not_charged_again(
    localstripe: LocalStripe, agent: PaymentAgent
) -> None:
    key = crash(agent, localstripe.url, "after_call").key
    [made] = payments_with_key(localstripe.url, key)  # Stripe took it; the ledger never heard

    resumed = agent.start(localstripe.url)

    assert resumed.returncode == 0, resumed
    assert [p["id"] for p in payments_with_key(localstripe.url, key)] == [made["id"]]
    step = agent.charge_step()
    assert (step.state, step.attempts) == (oncelog.StepState.DONE, 1)
    assert step.result["id"] == made["id"]
    assert step.result["metadata"][METADATA_KEY] == key
    assert json.loads(resumed.stdout)["charge"] == step.result
    assert agent.run_status() is oncelog.RunStatus.COMPLETED


def test_killed_before_charging_is_charged_once_with_the_same_key(
    localstripe: LocalStripe, agent: PaymentAgent
) -> None:
    key = crash(agent, localstripe.url, "after_intent_commit").key
    assert payments_with_key(localstripe.url, key) == []  # killed before the call

    resumed = agent.start(localstripe.url)

    assert resumed.returncode == 0, resumed
    [made] = payments_with_key(localstripe.url, key)
    step = agent.charge_step()
    assert (step.state, step.attempts, step.key) == (oncelog.StepState.DONE, 2, key)
    assert step.result["id"] == made["id"]
    assert agent.run_status() is oncelog.RunStatus.COMPLETED


def test_stripe_down_at_resume_tries_later_without_charging(
    tmp_path: Path, localstripe: LocalStripe, agent: PaymentAgent
) -> None:
    """The tool declares Stripe's 24-hour key window: with Stripe out of reach the charge
    in doubt is neither halted nor paid twice; the run is queued (exit 75) and, Stripe
    back, the probe finds the charge. (Before dedupe windows this halted for a person.)"""
    key = crash(agent, localstripe.url, "after_call").key
    [made] = payments_with_key(localstripe.url, key)
    unreachable = start_localstripe(tmp_path / "gone.log")
    unreachable.stop()  # a port where Stripe was and is no more

    resumed = agent.start(unreachable.url)

    assert resumed.returncode == oncelog.EXIT_TRY_LATER, resumed
    assert "ResendLater" in resumed.stderr
    assert [p["id"] for p in payments_with_key(localstripe.url, key)] == [made["id"]]
    assert agent.charge_step().state is oncelog.StepState.IN_FLIGHT
    assert agent.run_status() is oncelog.RunStatus.QUEUED

    back = agent.start(localstripe.url)

    assert back.returncode == 0, back
    assert [p["id"] for p in payments_with_key(localstripe.url, key)] == [made["id"]]
    step = agent.charge_step()
    assert (step.state, step.result["id"]) == (oncelog.StepState.DONE, made["id"])


def test_another_service_reusing_the_run_id_is_not_taken_for_this_charge(
    tmp_path: Path, localstripe: LocalStripe, client: stripe.StripeClient
) -> None:
    """Two services with their own ledgers both run "order-7" at one Stripe account; the
    second is killed before charging its customer. With their own key namespaces its
    probe does not answer with the first service's payment. (The same service, after
    losing its ledger, keeps its namespace and its keys: that is what lets Stripe and the
    probe recognise its own earlier charge.)"""
    run_id = f"order-{tmp_path.name}"
    first_customer = client.v1.customers.create(params={}).id
    first = PaymentAgent(tmp_path / "first.db", run_id, first_customer)
    assert first.start(localstripe.url).returncode == 0
    second_customer = client.v1.customers.create(params={}).id
    second = PaymentAgent(tmp_path / "second.db", run_id, second_customer, "shipping")
    key = crash(second, localstripe.url, "after_intent_commit").key

    resumed = second.start(localstripe.url)

    assert resumed.returncode == 0, resumed
    first_key = first.charge_step().key
    assert first_key != key
    assert [p["customer"] for p in payments_with_key(localstripe.url, first_key)] == [
        first_customer
    ]
    assert [p["customer"] for p in payments_with_key(localstripe.url, key)] == [second_customer]
    assert second.charge_step().result["customer"] == second_customer


def test_a_probe_beside_a_tool_it_cannot_see_never_charges_twice(
    localstripe: LocalStripe, agent: PaymentAgent
) -> None:
    """The tool creates the PaymentIntent itself, with Stripe's idempotency key and no
    marker; ``find_payment``, declared beside it, cannot see that payment. It must not
    answer "not found" (the charge would run again: a second PaymentIntent here, where
    localstripe ignores the key, and at Stripe once the key is forgotten); it cannot
    tell, and the run halts for a person at every restart."""
    direct = replace(agent, direct=True)
    crash(direct, localstripe.url, "after_call")
    [made] = payments_of(localstripe.url, direct.customer)

    for _ in range(2):
        resumed = direct.start(localstripe.url)
        assert [p["id"] for p in payments_of(localstripe.url, direct.customer)] == [made["id"]]
        assert resumed.returncode == oncelog.EXIT_HALTED, resumed

    assert direct.charge_step().state is oncelog.StepState.UNKNOWN
