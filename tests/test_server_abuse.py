"""What an outside tester did to both servers on 127.0.0.1: clients that stop reading, wrong keys from
many addresses, thousands of messages to the OpenAI-compatible endpoint. Real servers, a real store.
"""

from __future__ import annotations

import json
import logging
import socket

import httpx
import pytest
from conftest import UvicornThread, needs_data, wait_for

from parallelsearch.agents.policies import ScriptedPolicy
from parallelsearch.serving.server import create_app
from parallelsearch.settings import Settings
from parallelsearch.stores import create_retrieval_app
from parallelsearch.stores.http.api_key import KeyFailures
from parallelsearch.stores.http.read_limits import ReadLimits

pytestmark = needs_data

SCRIPT = [
    "<think> t </think><search> Scott Derrickson ## Ed Wood </search>",
    "<think> t </think><answer> yes </answer>",
]
KEY = "k-" + "7" * 24
Q = "Were Scott Derrickson and Ed Wood of the same nationality?"


def app_of(hotpot_store, **settings):
    s = Settings(**{"server_checkpointer": "none", **settings})
    return create_app(s, policy=ScriptedPolicy(SCRIPT), searcher=hotpot_store)


# ---- clients that stop reading -----------------------------------------------------------------------
class Closed(logging.Handler):
    """Collects the servers' 'did not drain' lines."""

    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if "did not drain" in record.getMessage():
            self.lines.append(record.getMessage())


@pytest.fixture
def closed_lines():
    handler = Closed()
    logger = logging.getLogger("parallelsearch.http")
    logger.addHandler(handler)
    try:
        yield handler.lines
    finally:
        logger.removeHandler(handler)


def _ask_and_stop_reading(port: int, request: bytes) -> socket.socket:
    """Send ``request`` on a socket with a small receive buffer and read nothing."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(("127.0.0.1", port))
    sock.sendall(request)
    return sock


def _rest(sock: socket.socket, limit: int) -> tuple[int, bool]:
    """Read what the server left (bounded by a minute of silence): bytes read, whether it ended."""
    sock.settimeout(60)
    got = 0
    try:
        while got <= limit:
            chunk = sock.recv(65536)
            if not chunk:
                return got, True
            got += len(chunk)
    except ConnectionResetError:
        return got, True
    except TimeoutError:
        return got, False
    return got, False


def _post(path: str, body: dict) -> bytes:
    raw = json.dumps(body).encode()
    head = (
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(raw)}\r\n\r\n"
    )
    return head.encode() + raw


def test_a_retrieve_client_that_stops_reading_is_closed_with_one_line(hotpot_store, closed_lines):
    """A 7 MB answer to a client that reads nothing: the server aborts the connection after the send
    timeout (it logs one line), and what the client can still read is far short of the answer."""
    body = {"queries": [f"Ed Wood film director {i}" for i in range(256)], "topk": 50}
    limits = ReadLimits(send_timeout_s=1).uvicorn_options()
    with UvicornThread(create_retrieval_app(hotpot_store), **limits) as srv:
        full = len(httpx.post(srv.url + "/retrieve", json=body, timeout=300).content)
        sock = _ask_and_stop_reading(srv.port, _post("/retrieve", body))
        try:
            wait_for(
                lambda: closed_lines, "the server closing the connection that stopped reading", timeout_s=300
            )
            got, ended = _rest(sock, full)
        finally:
            sock.close()
        assert ended and got < full, (got, full)
        assert len(closed_lines) == 1 and "server_send_timeout_s" in closed_lines[0], closed_lines
        # the server goes on serving
        assert httpx.post(srv.url + "/retrieve", json={"queries": ["Ed Wood"]}, timeout=60).status_code == 200


def test_a_langserve_client_that_stops_reading_is_closed_with_one_line(hotpot_store, closed_lines):
    """The app of ``serve`` runs behind the same protocol: its largest page (the OpenAPI schema,
    asked 40 times on one connection) to a client that reads nothing is cut off the same way."""
    options = Settings(server_send_timeout_s=1).read_limits().uvicorn_options()
    with UvicornThread(app_of(hotpot_store), **options) as srv:
        one = len(httpx.get(srv.url + "/openapi.json", timeout=60).content)
        ask = b"GET /openapi.json HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n" * 40
        sock = _ask_and_stop_reading(srv.port, ask)
        try:
            wait_for(
                lambda: closed_lines, "the server closing the connection that stopped reading", timeout_s=300
            )
            got, ended = _rest(sock, one * 40)
        finally:
            sock.close()
        assert ended and got < one * 40, (got, one)
        assert len(closed_lines) == 1, closed_lines
        assert httpx.get(srv.url + "/health", timeout=30).status_code == 200


def test_both_commands_take_the_send_timeout(monkeypatch):
    monkeypatch.setenv("PARALLELSEARCH_SERVER_SEND_TIMEOUT_S", "7")
    assert Settings().read_limits().uvicorn_options()["http"].limits.send_timeout_s == 7


# ---- wrong keys from many addresses --------------------------------------------------------------------
def _from(address: str) -> httpx.Client:
    return httpx.Client(transport=httpx.HTTPTransport(local_address=address), timeout=60)


def _guesses_from_60_addresses(url: str, path: str, body: dict) -> list[int]:
    """600 wrong keys, 10 from each of 127.0.0.1 .. 127.0.0.60 (one host, one /24)."""
    statuses = []
    for i in range(1, 61):
        with _from(f"127.0.0.{i}") as c:
            statuses += [
                c.post(url + path, json=body, headers={"X-API-Key": "guess"}).status_code for _ in range(10)
            ]
    return statuses


def test_600_wrong_keys_from_60_addresses_get_at_most_the_limit_then_429_on_both_servers(hotpot_store):
    retrieve = ("/retrieve", {"queries": ["Ed Wood"]})
    invoke = ("/parallelsearch/invoke", {"input": {"question": Q}})
    retriever = create_retrieval_app(hotpot_store, api_key=KEY, key_failures=KeyFailures(limit=10))
    app = app_of(hotpot_store, server_api_key=KEY, server_key_failure_limit=10)
    with UvicornThread(retriever) as r, UvicornThread(app) as a:
        for srv, (path, body) in ((r, retrieve), (a, invoke)):
            statuses = _guesses_from_60_addresses(srv.url, path, body)
            assert statuses.count(401) <= 10 and statuses.count(429) == 600 - statuses.count(401), statuses
            assert statuses.index(429) == statuses.count(401)  # every 401 came before the first 429
            with _from("127.0.0.61") as c:  # the right key, from the same network, still passes
                ok = c.post(srv.url + path, json=body, headers={"X-API-Key": KEY})
                assert ok.status_code == 200, ok.text


def test_failures_count_per_network_and_in_total():
    from parallelsearch.stores.http.api_key import client_prefix

    failures = KeyFailures(limit=3, window_s=60, total_limit=5)
    assert client_prefix("127.0.0.9") == "127.0.0.0/24"
    assert client_prefix("2001:db8::1") == client_prefix("2001:db8::ffff:1") == "2001:db8::/64"
    for i in range(3):
        failures.failed(f"2001:db8::{i + 1}")  # three addresses of one /64
    assert failures.retry_after_s("2001:db8::99") is not None  # a fourth address of it waits too
    assert failures.retry_after_s("2001:db9::1") is None  # another network does not
    failures.failed("10.0.0.1"), failures.failed("10.1.0.1")  # five in total
    assert failures.retry_after_s("192.168.5.5") is not None  # everyone without the key waits


# ---- messages on every route ----------------------------------------------------------------------
@pytest.mark.parametrize(
    "path, body",
    [
        ("/v1/chat/completions", {"model": "parallelsearch"}),
        ("/parallelsearch/invoke", {}),
    ],
)
def test_server_max_messages_holds_on_every_route_that_takes_messages(hotpot_store, path, body):
    messages = [{"role": "user", "content": f"m{i}"} for i in range(6)]
    with UvicornThread(app_of(hotpot_store, server_max_messages=5)) as srv:
        if path.startswith("/v1"):
            sent = {**body, "messages": messages}
        else:
            sent = {"input": {"messages": [{"type": "human", "content": m["content"]} for m in messages]}}
        too_many = httpx.post(srv.url + path, json=sent, timeout=60)
        assert too_many.status_code == 413, too_many.text
        assert "6 messages exceed the limit of 5 (server_max_messages)" in too_many.text


# ---- a stream over the response cap ----------------------------------------------------------------------
STREAMS = [
    ("/parallelsearch/stream", {"input": {"question": Q}}),
    ("/parallelsearch/stream_events", {"input": {"question": Q}}),
    (
        "/v1/chat/completions",
        {"model": "parallelsearch", "messages": [{"role": "user", "content": Q}], "stream": True},
    ),
]


@pytest.mark.parametrize(("path", "body"), STREAMS)
def test_a_stream_over_the_cap_ends_with_one_line_and_no_traceback(hotpot_store, caplog, path, body):
    caplog.set_level(logging.INFO)
    with UvicornThread(app_of(hotpot_store, server_max_response_bytes=6_000)) as srv:
        with httpx.stream("POST", srv.url + path, json=body, timeout=120) as r:
            got = b"".join(r.iter_bytes())
        assert b"server_max_response_bytes" in got.rsplit(b"event: error", 1)[-1]
        wait_for(
            lambda: any("cut the response" in m for m in caplog.messages), "the server's line on the cut"
        )
        assert httpx.get(srv.url + "/health", timeout=30).json()["admission"]["in_flight"] == 0
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]
    assert not errors, [r.getMessage() for r in errors]
    assert sum("cut the response" in m for m in caplog.messages) == 1
