"""The shipped classifications of failures: real clients, real refused connections, real
answers from a local server; and importing a classification imports no client."""

from __future__ import annotations

import asyncio
import subprocess
import threading
import urllib.error
import urllib.request
from collections.abc import Awaitable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest
import requests
import stripe
import urllib3

from oncelog.failures import Failure, by_status, first
from oncelog.failures import httpx as httpx_failures
from oncelog.failures import requests as requests_failures
from oncelog.failures import stripe as stripe_failures
from oncelog.failures import urllib as urllib_failures

from .support.launch import python
from .test_recovery import refused_port


class Answers(BaseHTTPRequestHandler):
    """Answers ``POST /<status>`` with that status; ``/slow`` never in time."""

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        if self.path == "/slow":
            threading.Event().wait(2.0)
        status = int(self.path.strip("/")) if self.path != "/slow" else 200
        self.send_response(status)
        self.send_header("Content-Length", "0")
        self.end_headers()


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Answers)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def raised(call: Any) -> BaseException:
    try:
        call()
    except Exception as exc:
        return exc
    raise AssertionError("the call did not raise")


async def raised_async(call: Awaitable[Any]) -> BaseException:
    try:
        await call
    except Exception as exc:
        return exc
    raise AssertionError("the call did not raise")


def test_importing_a_classification_imports_no_client() -> None:
    code = (
        "import sys, oncelog.failures.httpx, oncelog.failures.requests, "
        "oncelog.failures.stripe, oncelog.failures.urllib; "
        "print(sorted({'httpx', 'requests', 'stripe', 'urllib3'} & set(sys.modules)))"
    )
    found = subprocess.run(python("-c", code), capture_output=True, text=True, check=True)
    assert found.stdout.strip() == "[]"


@pytest.mark.parametrize(
    ("status", "failure"),
    [(400, Failure.REFUSED), (404, Failure.REFUSED), (422, Failure.REFUSED),
     (429, Failure.NOT_PERFORMED), (408, Failure.IN_DOUBT), (409, Failure.IN_DOUBT),
     (500, Failure.IN_DOUBT), (503, Failure.IN_DOUBT)],
)  # fmt: skip
def test_statuses(status: int, failure: Failure, server: str) -> None:
    assert by_status(status) is failure
    answer = httpx.post(f"{server}/{status}")
    assert httpx_failures.classify(raised(answer.raise_for_status)) is failure
    with requests.post(f"{server}/{status}", timeout=10) as got:
        assert requests_failures.classify(raised(got.raise_for_status)) is failure
    opened = raised(lambda: urllib.request.urlopen(f"{server}/{status}", data=b"", timeout=10))
    assert isinstance(opened, urllib.error.HTTPError)
    with opened:
        assert urllib_failures.classify(opened) is failure


def test_refused_connections_were_not_performed() -> None:
    url = refused_port()
    assert httpx_failures.classify(raised(lambda: httpx.post(url))) is Failure.NOT_PERFORMED
    refused = raised(lambda: requests.post(url, timeout=10))
    assert requests_failures.classify(refused) is Failure.NOT_PERFORMED
    opened = raised(lambda: urllib.request.urlopen(url, data=b"", timeout=10))
    assert urllib_failures.classify(opened) is Failure.NOT_PERFORMED


def test_unresolvable_names_were_not_performed() -> None:
    url = "http://no-such-host.invalid/charge"
    assert httpx_failures.classify(raised(lambda: httpx.post(url))) is Failure.NOT_PERFORMED
    refused = raised(lambda: requests.post(url, timeout=10))
    assert requests_failures.classify(refused) is Failure.NOT_PERFORMED
    opened = raised(lambda: urllib.request.urlopen(url, data=b"", timeout=10))
    assert urllib_failures.classify(opened) is Failure.NOT_PERFORMED


def test_a_read_timeout_is_in_doubt(server: str) -> None:
    url = f"{server}/slow"
    slow = raised(lambda: httpx.post(url, timeout=0.3))
    assert httpx_failures.classify(slow) is Failure.IN_DOUBT
    slow = raised(lambda: requests.post(url, timeout=0.3))
    assert requests_failures.classify(slow) is Failure.IN_DOUBT
    slow = raised(lambda: urllib.request.urlopen(url, data=b"", timeout=0.3))
    assert urllib_failures.classify(slow) is Failure.IN_DOUBT


def test_urls_that_cannot_be_sent_are_refused() -> None:
    assert httpx_failures.classify(raised(lambda: httpx.post("ftp://x/"))) is Failure.REFUSED
    missing = raised(lambda: requests.post("no-scheme", timeout=1))
    assert requests_failures.classify(missing) is Failure.REFUSED


def test_stripe_errors() -> None:
    def error(cls: type[stripe.StripeError], **fields: Any) -> stripe.StripeError:
        return cls("message", **fields)

    classify = stripe_failures.classify
    assert classify(error(stripe.CardError, param=None, code="card_declined")) is Failure.REFUSED
    assert classify(error(stripe.InvalidRequestError, param="amount")) is Failure.REFUSED
    assert classify(error(stripe.AuthenticationError)) is Failure.REFUSED
    assert classify(error(stripe.RateLimitError)) is Failure.NOT_PERFORMED
    in_use = error(stripe.IdempotencyError, code="idempotency_key_in_use")
    assert classify(in_use) is Failure.IN_PROGRESS
    assert classify(error(stripe.IdempotencyError)) is Failure.KEY_MISMATCH
    assert classify(error(stripe.APIConnectionError)) is Failure.IN_DOUBT
    assert classify(error(stripe.APIError, http_status=500)) is Failure.IN_DOUBT
    assert classify(ValueError("not stripe's")) is None


def test_others_are_not_classified_and_first_combines() -> None:
    for classify in (httpx_failures.classify, requests_failures.classify,
                     stripe_failures.classify, urllib_failures.classify):  # fmt: skip
        assert classify(KeyError("mine")) is None
    mine = first(
        lambda exc: Failure.REFUSED if isinstance(exc, KeyError) else None,
        urllib_failures.classify,
    )
    assert mine(KeyError("x")) is Failure.REFUSED
    assert mine(ConnectionRefusedError()) is Failure.IN_DOUBT  # bare: raised who knows where
    assert mine(ValueError()) is None
    assert urllib_failures.classify(urllib.error.URLError("no route")) is Failure.IN_DOUBT


def test_a_refusal_is_not_performed_only_through_the_clients_own_transport() -> None:
    """A refused first connection is not performed through each client's own transport,
    with retries that only connect (httpcore's ``retries``, a urllib3 ``Retry`` meeting
    only refusals); through a transport, adapter or handler of someone else's, which may
    have sent the request before and be retrying it, it is in doubt."""
    url = refused_port()

    async def async_post() -> BaseException:
        async with httpx.AsyncClient() as client:
            return await raised_async(client.post(url))

    class Wrapping(httpx.BaseTransport):
        def __init__(self) -> None:
            self.inner = httpx.HTTPTransport()

        def handle_request(self, request: httpx.Request) -> httpx.Response:
            return self.inner.handle_request(request)

    def through(transport: httpx.BaseTransport) -> BaseException:
        with httpx.Client(transport=transport) as client:
            return raised(lambda: client.post(url))

    assert httpx_failures.classify(through(httpx.HTTPTransport(retries=2))) is Failure.NOT_PERFORMED
    assert httpx_failures.classify(asyncio.run(async_post())) is Failure.NOT_PERFORMED
    assert httpx_failures.classify(through(Wrapping())) is Failure.IN_DOUBT

    class Adapter(requests.adapters.HTTPAdapter):
        def send(self, *args: Any, **kwargs: Any) -> requests.Response:
            return super().send(*args, **kwargs)

    def mounted(adapter: requests.adapters.HTTPAdapter) -> BaseException:
        with requests.Session() as session:
            session.mount("http://", adapter)
            return raised(lambda: session.post(url, timeout=10))

    retrying = requests.adapters.HTTPAdapter(max_retries=urllib3.Retry(2, allowed_methods=None))
    assert requests_failures.classify(mounted(retrying)) is Failure.NOT_PERFORMED
    assert requests_failures.classify(mounted(Adapter())) is Failure.IN_DOUBT

    class Handler(urllib.request.HTTPHandler):
        def http_open(self, req: urllib.request.Request) -> Any:
            return super().http_open(req)

    opener = urllib.request.build_opener(Handler)
    opened = raised(lambda: opener.open(url, data=b"", timeout=10))
    assert urllib_failures.classify(opened) is Failure.IN_DOUBT


def test_a_refused_proxy() -> None:
    """Refused by the proxy, the request never left: not performed for httpx and urllib;
    requests' ``ProxyError`` stays in doubt (it also covers a proxy that failed later)."""
    proxy = refused_port().removesuffix("/charge")
    url = "http://127.0.0.1:9/charge"
    with httpx.Client(proxy=proxy) as client:
        assert httpx_failures.classify(raised(lambda: client.post(url))) is Failure.NOT_PERFORMED
    refused = raised(lambda: requests.post(url, proxies={"http": proxy}, timeout=10))
    assert isinstance(refused, requests.exceptions.ProxyError)
    assert requests_failures.classify(refused) is Failure.IN_DOUBT
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({"http": proxy}))
    opened = raised(lambda: opener.open(url, data=b"", timeout=10))
    assert urllib_failures.classify(opened) is Failure.NOT_PERFORMED
