"""Both servers against a neighbour, a slow client and a careless one (real HTTP on 127.0.0.1, a
real store, the scripted policy or a stand-in OpenAI chat server). Each test failed on the code
before:

- a neighbour sending wrong keys locked out a client with the right one (429), and any local
  process could rotate ``X-Forwarded-For`` past the hold-back;
- a slowloris connection, a body at 10 B/s and an endless head were never cut off;
- a 4,500-message body had every message built into the model request on the event loop;
- ``/batch`` with inputs on one thread ran them at once and the thread kept one episode;
- ``tool_calls: "x"``, a call without ``args``, ``question`` with ``messages`` were 500s, a tool
  message answering no call reached the model, passwords in a DSN were printed, the open
  ``/health`` showed the system prompt, the ``openai:`` policy took no CA bundle.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time

import httpx
import pytest
from conftest import UvicornThread, needs_data
from fastapi import FastAPI
from servers import make_openai_chat_test_server
from serving import record

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
KEY = "k-" + "5" * 24
Q = "Were Scott Derrickson and Ed Wood of the same nationality?"
BODY = {"queries": ["Ed Wood"]}


def app_of(hotpot_store, **settings):
    s = Settings(**{"server_checkpointer": "none", **settings})
    return create_app(s, policy=ScriptedPolicy(SCRIPT), searcher=hotpot_store)


def invoke(url, body, path="/parallelsearch/invoke", **kw) -> httpx.Response:
    return httpx.post(url + path, json=body, timeout=120, **kw)


# ---- a neighbour ---------------------------------------------------------------------------------
def test_wrong_keys_from_a_neighbour_never_lock_out_the_right_key_on_both_servers(hotpot_store):
    failures = KeyFailures(limit=3, window_s=600)
    retriever = create_retrieval_app(hotpot_store, api_key=KEY, key_failures=failures)
    app = app_of(hotpot_store, server_api_key=KEY, server_key_failure_limit=3)
    with UvicornThread(retriever) as r, UvicornThread(app) as a:
        for _ in range(3):
            assert (
                httpx.post(r.url + "/retrieve", json=BODY, headers={"X-API-Key": "guess"}).status_code == 401
            )
            assert (
                invoke(a.url, {"input": {"question": Q}}, headers={"X-API-Key": "guess"}).status_code == 401
            )
        held = httpx.post(r.url + "/retrieve", json=BODY, headers={"X-API-Key": "guess"})
        assert held.status_code == 429 and held.json()["problem"] == "held_back"  # the guesser waits
        assert invoke(a.url, {"input": {"question": Q}}).status_code == 429  # so does no key
        # the client that has the key, from the same address, is served
        ok = httpx.post(r.url + "/retrieve", json=BODY, headers={"X-API-Key": KEY}, timeout=60)
        assert ok.status_code == 200, ok.text
        assert invoke(a.url, {"input": {"question": Q}}, headers={"X-API-Key": KEY}).status_code == 200


def _rotated_guesses(url: str, n: int) -> list[int]:
    return [
        httpx.post(
            url + "/retrieve", json=BODY, headers={"X-API-Key": "guess", "X-Forwarded-For": f"10.{i}.0.1"}
        ).status_code
        for i in range(n)
    ]


def test_forwarded_for_is_believed_only_from_configured_proxies(hotpot_store):
    def retriever():
        return create_retrieval_app(hotpot_store, api_key=KEY, key_failures=KeyFailures(limit=3))

    with UvicornThread(retriever()) as srv:  # the served defaults: no proxy is trusted
        assert _rotated_guesses(srv.url, 5) == [401, 401, 401, 429, 429]
    proxy = ReadLimits(forwarded_allow_ips=("127.0.0.1",)).uvicorn_options()
    # behind a named proxy its clients count apart (these five on five networks: a /24 counts together)
    with UvicornThread(retriever(), **proxy) as srv:
        assert _rotated_guesses(srv.url, 5) == [401] * 5


def test_both_commands_serve_with_the_read_limits(hotpot_store, monkeypatch):
    import uvicorn

    from parallelsearch.cli import main

    seen: list[dict] = []
    monkeypatch.setattr(uvicorn, "run", lambda app, **kw: seen.append(kw))
    monkeypatch.setenv("PARALLELSEARCH_CHROMA_PATH", hotpot_store.location)
    monkeypatch.setenv("PARALLELSEARCH_SERVER_HEAD_TIMEOUT_S", "7")
    serve = ["serve", "--store", hotpot_store.name, "--policy", "oracle", "--checkpointer", "none"]
    assert main(serve) == 0
    assert main(["serve-retriever", "--store", hotpot_store.name, "--forwarded-allow-ips", "10.1.1.1"]) == 0
    for kw in seen:
        assert kw["http"].limits.head_timeout_s == 7 and kw["timeout_keep_alive"] == 30
    assert seen[0]["proxy_headers"] is False
    assert (seen[1]["proxy_headers"], seen[1]["forwarded_allow_ips"]) == (True, "10.1.1.1")


# ---- slow clients --------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def impatient_retriever(hotpot_store):
    limits = ReadLimits(head_timeout_s=1, body_timeout_s=1, max_head_bytes=4096)
    with UvicornThread(create_retrieval_app(hotpot_store), **limits.uvicorn_options()) as srv:
        yield srv


def _trickle(port: int, head: bytes, drip: bytes) -> bytes:
    """Send ``head``, then ``drip`` a byte every 0.1 s until the server answers or closes; what it sent.
    No deadline is asserted: the socket waits up to a minute for the server to act."""
    with socket.create_connection(("127.0.0.1", port), timeout=60) as sock:
        sock.sendall(head)
        sock.settimeout(0.1)
        for byte in drip:
            try:
                answer = sock.recv(65536)
            except TimeoutError:
                try:
                    sock.sendall(bytes([byte]))
                except OSError:  # closed by the server
                    break
                continue
            return answer + _rest(sock)
        sock.settimeout(60)
        return _rest(sock)


def _rest(sock: socket.socket) -> bytes:
    sock.settimeout(60)
    out = b""
    try:
        while chunk := sock.recv(65536):
            out += chunk
    except OSError:
        pass
    return out


def test_a_slowloris_head_and_a_slow_body_are_cut_off(impatient_retriever):
    port = impatient_retriever.port
    slow_head = _trickle(port, b"POST /retrieve HTTP/1.1\r\n", b"X-Slow: " + b"a" * 2000)
    assert slow_head.startswith(b"HTTP/1.1 408") and b"request head" in slow_head
    idle = _trickle(port, b"", b" " * 0)  # a connection that sends nothing is closed as well
    assert idle.startswith(b"HTTP/1.1 408")
    body = json.dumps({"queries": ["Ed Wood " * 200]}).encode()
    head = (
        f"POST /retrieve HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode()
    slow_body = _trickle(port, head, body)  # 10 B/s
    assert slow_body.startswith(b"HTTP/1.1 408") and b"request body" in slow_body


def test_a_head_over_the_limit_is_a_431(impatient_retriever):
    head = b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n" + b"X-Pad: " + b"p" * 8000 + b"\r\n\r\n"
    answer = _trickle(impatient_retriever.port, head, b"")
    assert answer.startswith(b"HTTP/1.1 431")
    ok = httpx.get(impatient_retriever.url + "/health", timeout=60)  # ordinary requests pass
    assert ok.status_code == 200


def test_the_served_defaults_bound_the_response_and_the_read():
    s = Settings()
    assert s.server_max_response_bytes == 10_000_000
    limits = s.read_limits()
    assert (limits.head_timeout_s, limits.body_timeout_s, limits.forwarded_allow_ips) == (20, 60, ())


# ---- a large conversation ------------------------------------------------------------------------
def held_chat_server(arrived: threading.Event, release: threading.Event) -> FastAPI:
    """A STAND-IN OpenAI chat server that answers "yes" once ``release`` is set, so the test can
    look at the app while a request is in flight; it records every request body."""

    async def hold() -> None:
        arrived.set()
        await asyncio.to_thread(release.wait, 300)

    return make_openai_chat_test_server(["yes"], hold=hold)


def conversation(n: int, pad: int = 15) -> list[dict]:
    msgs = [
        {"role": "user" if i % 2 == 0 else "assistant", "content": f"message {i} " + "lorem ipsum " * pad}
        for i in range(n - 1)
    ]
    return [*msgs, {"role": "user", "content": Q}]


def chat_app(chat_url: str, hotpot_store, **settings):
    from langchain_openai import ChatOpenAI

    from parallelsearch.agents.policies.chat import ChatModelPolicy

    model = ChatOpenAI(model="m", base_url=chat_url + "/v1", api_key="sk-test", timeout=300, max_retries=0)
    s = Settings(**{"server_checkpointer": "none", **settings})
    return create_app(s, policy=ChatModelPolicy(model), searcher=hotpot_store)


def test_a_long_conversation_is_bounded_and_health_answers_while_it_runs(hotpot_store):
    arrived, release = threading.Event(), threading.Event()
    chat = held_chat_server(arrived, release)
    with UvicornThread(chat) as model, UvicornThread(chat_app(model.url, hotpot_store)) as srv:
        too_many = invoke(srv.url, {"input": {"messages": conversation(4500, pad=10)}})
        assert too_many.status_code == 413 and "server_max_messages" in too_many.json()["detail"]
        done: dict = {}
        body = {"input": {"messages": conversation(999)}}
        worker = threading.Thread(target=lambda: done.update(r=invoke(srv.url, body)))
        worker.start()
        assert arrived.wait(300), "the model was never asked"
        t0 = time.perf_counter()
        health = httpx.get(srv.url + "/health", timeout=60)
        record("/health while a 999-message request is in flight", time.perf_counter() - t0)
        assert health.status_code == 200 and "r" not in done  # answered while the big one runs
        release.set()
        worker.join(300)
    assert done["r"].status_code == 200, done["r"].text[:300]
    sent = chat.state.requests[0]["messages"]
    # the history the model sees is bounded by default (server_max_history_messages: 100)
    assert len(sent) <= 100 + 3, len(sent)


def test_a_request_may_not_ask_for_more_history_than_the_server_allows(app_server_none):
    body = {"input": {"question": Q}, "config": {"configurable": {"max_history_messages": 5000}}}
    r = invoke(app_server_none.url, body)
    assert r.status_code == 422 and "server_max_history_messages" in r.json()["detail"]


@pytest.fixture(scope="module")
def app_server_none(hotpot_store):
    app = app_of(hotpot_store, graph_config={"system_prompt": "SECRET-OPERATOR-INSTRUCTIONS"})
    with UvicornThread(app) as srv:
        yield srv


# ---- batches on one thread -----------------------------------------------------------------------
@pytest.mark.parametrize("strategy", ["enqueue", "reject"])
def test_a_batch_on_one_thread_keeps_every_episode(hotpot_store, tmp_path, strategy):
    from langserve import RemoteRunnable

    app = app_of(
        hotpot_store,
        server_checkpointer="sqlite",
        server_checkpoint_url=str(tmp_path / "threads.sqlite"),
        server_multitask_strategy=strategy,
    )
    questions = [{"question": f"question {i}: {Q}"} for i in range(4)]
    with UvicornThread(app) as srv:
        remote = RemoteRunnable(srv.url + "/parallelsearch", timeout=300)
        outputs = remote.batch(questions, {"configurable": {"thread_id": "one-thread"}})
        state = httpx.get(srv.url + "/parallelsearch/threads/one-thread", timeout=60).json()
    assert [o["answer"] for o in outputs] == ["yes"] * 4
    assert state["episodes"] == 4
    assert [h["question"] for h in state["values"]["history"]] == [q["question"] for q in questions]


# ---- client mistakes -----------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("messages", "question", "detail"),
    [
        ([{"role": "assistant", "content": "", "tool_calls": "x"}], None, "tool_calls must be a list"),
        (
            [
                {"role": "assistant", "content": "", "tool_calls": [{"name": "search", "id": "c1"}]},
                {"role": "tool", "tool_call_id": "c1", "content": "r"},
            ],
            None,
            "tool_calls[0].args must be an object",
        ),  # fmt: skip
        ([], Q, "not both"),
    ],
    ids=["tool-calls-text", "call-without-args", "question-and-messages"],
)
def test_malformed_messages_are_a_422_not_a_500(app_server_none, messages, question, detail):
    item = {"messages": [{"role": "user", "content": "hi"}, *messages, {"role": "user", "content": Q}]}
    if question is not None:
        item["question"] = question
    for path, body in (
        ("/parallelsearch/invoke", {"input": item}),
        ("/parallelsearch/batch", {"inputs": [item]}),
    ):
        r = invoke(app_server_none.url, body, path=path)
        assert r.status_code == 422 and detail in r.json()["detail"], r.text


def test_a_tool_message_answering_no_call_never_reaches_the_model(hotpot_store):
    chat = make_openai_chat_test_server()
    orphan = [
        {"role": "user", "content": "hi"},
        {"role": "tool", "tool_call_id": "never-called", "content": "stray"},
        {"role": "assistant", "content": "hello"},
        {"role": "user", "content": Q},
    ]
    with UvicornThread(chat) as model, UvicornThread(chat_app(model.url, hotpot_store)) as srv:
        r = invoke(srv.url, {"input": {"messages": orphan}})
    assert r.status_code == 200, r.text[:300]
    sent = [m for body in chat.state.requests for m in body["messages"]]
    assert not [m for m in sent if m.get("tool_call_id") == "never-called"]


def test_the_open_health_does_not_show_the_system_prompt(app_server_none):
    health = httpx.get(app_server_none.url + "/health", timeout=60)
    assert health.status_code == 200 and "SECRET-OPERATOR-INSTRUCTIONS" not in health.text
    assert health.json()["graph"]["system_prompt"] == "(set)"


def test_a_text_part_without_text_is_named_as_such(app_server_none):
    body = {
        "model": "parallelsearch",
        "messages": [{"role": "user", "content": [{"type": "text", "text": 5}]}],
    }
    r = invoke(app_server_none.url, body, path="/v1/chat/completions")
    assert r.status_code == 400 and "a text part's 'text' must be a string, got int" in r.json()["detail"]


@pytest.mark.parametrize(
    "target",
    [
        "host=127.0.0.1 port=1 user=u password=s3cret-pw dbname=x",
        "postgresql://u@127.0.0.1:1/x?sslmode=disable&password=s3cret-pw",
    ],
    ids=["key-value-dsn", "query-password"],
)
def test_postgres_passwords_are_masked_in_start_up_errors(target):
    from parallelsearch.serving.checkpointers import open_checkpointer

    async def start() -> None:
        async with open_checkpointer("postgres", target, timeout_s=1):
            pass

    with pytest.raises((ValueError, ConnectionError)) as e:
        asyncio.run(start())
    assert "s3cret-pw" not in str(e.value) and "***" in str(e.value)


def test_an_unencoded_slash_in_a_url_password_is_a_clear_error(hotpot_store):
    from parallelsearch.agents.policies.openai_compat import OpenAICompletionsPolicy
    from parallelsearch.stores import RetrieverClient

    for make in (
        lambda: OpenAICompletionsPolicy("m", "http://user:pa/ss@127.0.0.1:1/v1"),
        lambda: RetrieverClient("http://user:pa/ss@127.0.0.1:1/retrieve"),
    ):
        with pytest.raises(ValueError, match="percent-encode") as e:
            make()
        assert "pa/ss" not in str(e.value)


def test_the_openai_policy_takes_a_ca_bundle(tmp_path):
    from parallelsearch.agents.policies.config import PolicyConfig
    from parallelsearch.graphs.factory import make_policy

    bad = tmp_path / "not-a-bundle.pem"
    bad.write_text("not a certificate")
    cfg = PolicyConfig(policy="openai:m@https://127.0.0.1:1/v1", openai_ca_bundle=str(bad))
    with pytest.raises(ValueError, match="cannot read the CA bundle"):
        make_policy(cfg)
    import certifi

    policy = make_policy(
        PolicyConfig(policy="openai:m@https://127.0.0.1:1/v1", openai_ca_bundle=certifi.where())
    )
    assert policy._tls.cert_store_stats()["x509_ca"] > 0
