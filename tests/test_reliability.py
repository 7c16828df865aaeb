"""Reliability of both servers under bad input and load .

Real servers on 127.0.0.1 (uvicorn in a thread), real HTTP clients, a real embedded Chroma
store; the policy is the scripted stand-in (no LLM here). Each defect's test failed on the
code before the fix:

- 5: ``/retrieve`` answered 500 to a lone surrogate and reset the keep-alive connection;
- 6: the config-hash routes skipped the guard and the cap; a lone-surrogate question was a
  500 (invoke) or a cut stream; deep nesting a plain-text 500; errors were logged twice;
- 9: a burst beyond the in-flight cap was refused at once, without ``Retry-After``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading

import httpx
import pytest
from conftest import UvicornThread, needs_data, wait_for
from engines import FailingPolicy, GatedPolicy

from parallelsearch.agents.policies import ScriptedPolicy
from parallelsearch.serving.server import create_app
from parallelsearch.settings import Settings
from parallelsearch.stores import create_retrieval_app
from parallelsearch.stores.http.asgi_guard import clean_json, json_depth, parse_json

SCRIPT = [
    "<think> t </think><search> Scott Derrickson ## Ed Wood </search>",
    "<think> t </think><answer> yes </answer>",
]
SURROGATE_BODY = json.dumps({"queries": ["a \ud800 Ed Wood"]}).encode()  # what json.dumps writes
DEEP = b"[" * 50_000 + b"]" * 50_000
JSON = {"content-type": "application/json"}


def config_hash(config: dict) -> str:
    """The ``/c/{hash}`` segment LangServe's playground and clients send (lz-string of the JSON)."""
    from langserve.lzstring import LZString

    return LZString.compressToEncodedURIComponent(json.dumps(config))


# ---- the pure parts ------------------------------------------------------------------------------
def test_depth_is_counted_without_parsing_and_brackets_in_strings_do_not_count():
    assert json_depth(b'{"a": [1, {"b": "[[[[{{{"}]}') == 3
    assert json_depth(b'"\\"[[["') == 0 and json_depth(DEEP) == 50_000
    cleaned, n = clean_json({"k\ud800": ["ok", "x\udfff"], "n": 1})
    assert cleaned == {"k\ufffd": ["ok", "x\ufffd"], "n": 1} and n == 2
    body = parse_json(b'{"q": "\\ud83d\\ude00 pair \\udc00 lone", "bad": "\xff"}')
    assert body.value == {"q": "\U0001f600 pair \ufffd lone", "bad": "\ufffd"} and body.repaired >= 1
    assert json.loads(body.raw) == body.value  # what the app reads is valid UTF-8 JSON
    assert parse_json(b"{nope").error.startswith("malformed JSON")


def test_admission_is_first_in_first_out_and_a_batch_holds_one_slot_per_input():
    from parallelsearch.serving.admission import AdmissionQueue, Refused

    async def scenario():
        q = AdmissionQueue(limit=4, queue_size=2, max_wait_s=30)
        order: list[str] = []
        gate = asyncio.Event()

        async def run(name: str, weight: int):
            async with q.slot(weight):
                order.append(name)
                await gate.wait()

        first = asyncio.create_task(run("a", 3))  # 3 of 4 slots
        await asyncio.sleep(0)
        batch = asyncio.create_task(run("batch", 9))  # needs all 4: waits
        await asyncio.sleep(0)
        small = asyncio.create_task(run("small", 1))  # one slot is free, but it queues behind the batch
        await asyncio.sleep(0)
        assert (q.in_flight, q.waiting) == (3, 2)
        with pytest.raises(Refused) as refused:
            async with q.slot(1):
                pass
        assert "queue of 2 is full" in refused.value.reason and refused.value.retry_after_s >= 1
        gate.set()
        await asyncio.gather(first, batch, small)
        return order, q.stats()

    order, stats = asyncio.run(scenario())
    assert order == ["a", "batch", "small"]
    assert stats["in_flight"] == 0 and stats["refused_full"] == 1 and stats["queued"] == 2


def test_admission_settings_flags_over_environment_over_defaults(monkeypatch):
    from parallelsearch.cli import build_parser
    from parallelsearch.cli.common import settings_from_args

    defaults = Settings()
    assert (defaults.server_max_concurrency, defaults.server_queue_size) == (64, 512)
    assert defaults.server_queue_timeout_s == 60 and defaults.server_max_batch >= 200
    monkeypatch.setenv("PARALLELSEARCH_SERVER_QUEUE_SIZE", "7")
    monkeypatch.setenv("PARALLELSEARCH_SERVER_MAX_CONCURRENCY", "5")
    args = build_parser().parse_args(["serve", "--queue-timeout", "2.5", "--max-concurrency", "3"])
    s = settings_from_args(args)
    assert (s.server_max_concurrency, s.server_queue_size, s.server_queue_timeout_s) == (3, 7, 2.5)


# ---- defect 5: /retrieve -------------------------------------------------------------------------
@pytest.fixture(scope="module")
def retriever(hotpot_store):
    with UvicornThread(create_retrieval_app(hotpot_store, max_body_bytes=200_000)) as srv:
        yield srv


@needs_data
def test_retrieve_repairs_a_lone_surrogate_and_the_keep_alive_connection_survives(retriever):
    with httpx.Client(base_url=retriever.url, timeout=30) as client:
        r = client.post("/retrieve", content=SURROGATE_BODY, headers=JSON)
        assert r.status_code == 200, r.text
        assert len(r.json()["result"]) == 1 and r.json()["result"][0]
        invalid_utf8 = b'{"queries": ["Ed Wood \xff\xfe"]}'
        assert client.post("/retrieve", content=invalid_utf8, headers=JSON).status_code == 200
        ok = client.post("/retrieve", json={"queries": ["Ed Wood"]})  # the same connection
        assert ok.status_code == 200 and ok.json()["result"][0]


@needs_data
def test_retrieve_limits_body_size_and_depth_before_parsing(retriever):
    with httpx.Client(base_url=retriever.url, timeout=30) as client:
        big = client.post("/retrieve", json={"queries": ["x" * 300_000]})
        assert big.status_code == 413 and "exceeds the limit of 200000 bytes" in big.json()["detail"]
        deep = client.post("/retrieve", content=DEEP, headers=JSON)
        assert deep.status_code == 400 and "nested 50000 levels deep" in deep.json()["detail"]
        assert client.post("/retrieve", json={"queries": ["Ed Wood"]}).status_code == 200


def test_retrieve_unhandled_error_is_one_json_500_and_the_connection_goes_on(caplog):
    class Failing:
        name = "failing"

        def search_batch(self, queries, k=3):
            raise RuntimeError("index file vanished")

        def count(self):
            return 0

    with (
        UvicornThread(create_retrieval_app(Failing())) as srv,
        httpx.Client(base_url=srv.url, timeout=30) as client,
        caplog.at_level(logging.ERROR),
    ):
        r = client.post("/retrieve", json={"queries": ["x"]})
        assert r.status_code == 500 and r.json()["detail"] == "internal error"
        errors = [rec for rec in caplog.records if rec.levelno >= logging.ERROR]
        assert len(errors) == 1 and r.json()["error_id"] in errors[0].getMessage()
        assert client.get("/health").status_code == 200  # the same keep-alive connection


# ---- defect 6: the LangServe guard on every route ------------------------------------------------
@pytest.fixture(scope="module")
def guarded(hotpot_store):
    settings = Settings(
        server_max_batch=8,
        server_max_question_chars=500,
        server_checkpointer="none",
        server_max_concurrency=64,
    )
    app = create_app(settings, policy=ScriptedPolicy(SCRIPT), searcher=hotpot_store)
    with UvicornThread(app) as srv:
        yield srv


HASH_PATH = "/parallelsearch/c/{h}/{op}"
BAD_INPUTS = [
    ("invoke", {"input": {"question": "  "}}, 422, "must not be empty"),
    ("stream", {"input": {"question": ""}}, 422, "must not be empty"),
    ("batch", {"inputs": [{"question": "q"}, {"question": " "}]}, 422, "must not be empty"),
    ("invoke", {"input": {"question": "x" * 1_500_000}}, 413, "exceeds the limit"),
    ("stream", {"input": {"question": "x" * 501}}, 413, "exceeds the limit of 500"),
    ("batch", {"inputs": [{"question": "q"}] * 100}, 413, "batch of 100 exceeds"),
]


@needs_data
@pytest.mark.parametrize(("op", "body", "status", "message"), BAD_INPUTS)
def test_config_hash_routes_go_through_the_guard(guarded, op, body, status, message):
    url = guarded.url + HASH_PATH.format(h=config_hash({"configurable": {"top_k": 1}}), op=op)
    r = httpx.post(url, json=body, timeout=60)
    assert r.status_code == status and message in r.json()["detail"], r.text[:300]


@needs_data
def test_config_hash_route_runs_with_its_config(guarded):
    url = guarded.url + HASH_PATH.format(h=config_hash({"configurable": {"top_k": 1}}), op="invoke")
    out = httpx.post(url, json={"input": {"question": "q?"}}, timeout=60).json()["output"]
    assert out["answer"] == "yes" and out["passages"] == 2  # top_k=1 came from the hash


@needs_data
def test_a_lone_surrogate_question_is_answered_on_invoke_and_stream(guarded):
    question = json.dumps({"input": {"question": "Ed Wood \ud800?"}}).encode()
    with httpx.Client(base_url=guarded.url, timeout=60) as client:
        r = client.post("/parallelsearch/invoke", content=question, headers=JSON)
        assert r.status_code == 200, r.text[:300]
        assert "Ed Wood \ufffd?" in r.json()["output"]["transcript"]
        with client.stream("POST", "/parallelsearch/stream", content=question, headers=JSON) as s:
            text = "".join(s.iter_text())
        assert s.status_code == 200 and "event: end" in text and "event: error" not in text
        assert client.post("/parallelsearch/invoke", json={"input": {"question": "q?"}}).status_code == 200


@needs_data
def test_deep_nesting_is_a_json_400_before_parsing(guarded):
    with httpx.Client(base_url=guarded.url, timeout=60) as client:
        for path in ("/parallelsearch/invoke", "/parallelsearch/c/x/batch", "/rag/stream"):
            r = client.post(path, content=b'{"input": ' + DEEP + b"}", headers=JSON)
            assert r.status_code == 400 and "nested 50001 levels deep" in r.json()["detail"], path
        assert client.post("/parallelsearch/invoke", json={"input": {"question": "q?"}}).status_code == 200


@needs_data
def test_an_unhandled_error_is_one_json_500_with_the_id_of_its_one_log_line(hotpot_store, caplog):
    app = create_app(Settings(server_checkpointer="none"), policy=FailingPolicy(), searcher=hotpot_store)
    with UvicornThread(app) as srv, caplog.at_level(logging.ERROR):
        h = config_hash({"configurable": {"top_k": 2}})
        for path in ("/parallelsearch/invoke", f"/parallelsearch/c/{h}/invoke"):
            caplog.clear()
            r = httpx.post(srv.url + path, json={"input": {"question": "q?"}}, timeout=60)
            assert r.status_code == 500 and r.headers["content-type"] == "application/json"
            errors = [rec for rec in caplog.records if rec.levelno >= logging.ERROR]
            assert len(errors) == 1, [e.getMessage() for e in errors]
            assert r.json()["error_id"] in errors[0].getMessage() and errors[0].exc_info


# ---- defect 9: admission control -----------------------------------------------------------------
@needs_data
def test_a_burst_at_default_settings_is_queued_not_refused(hotpot_store):
    """RemoteRunnable.batch of 200 inputs, then 300 concurrent invokes: all answered, none refused."""
    from langserve import RemoteRunnable

    defaults = Settings(server_checkpointer="none")  # the rest: the defaults users get
    # answer-only turns: each run is cheap, so the burst measures admission, not this machine's CPU
    quick = ScriptedPolicy(["<think> t </think><answer> yes </answer>"])
    app = create_app(defaults, policy=quick, searcher=hotpot_store)
    with UvicornThread(app) as srv:
        remote = RemoteRunnable(srv.url + "/parallelsearch", timeout=300)
        outs = remote.batch([{"question": f"question {i}?"} for i in range(200)])
        assert len(outs) == 200 and all(o["answer"] == "yes" for o in outs)

        async def burst():
            limits = httpx.Limits(max_connections=None, max_keepalive_connections=None)
            async with httpx.AsyncClient(timeout=300, limits=limits) as client:
                return await asyncio.gather(
                    *(
                        client.post(
                            srv.url + "/parallelsearch/invoke", json={"input": {"question": f"q{i}?"}}
                        )
                        for i in range(300)
                    )
                )

        replies = asyncio.run(burst())
        codes = [r.status_code for r in replies]
        refused = {r.text for r in replies if r.status_code != 200}
        assert codes == [200] * 300, ({c: codes.count(c) for c in set(codes)}, refused)
        admission = httpx.get(srv.url + "/health", timeout=10).json()["admission"]
        assert admission["queued"] > 0 and admission["in_flight"] == 0 and admission["waiting"] == 0


@pytest.fixture()
def gated(hotpot_store):
    """A server with one slot; its policy holds every request until the test opens the gate."""

    def start(**settings):
        policy = GatedPolicy(SCRIPT)
        s = Settings(server_checkpointer="none", server_max_concurrency=1, **settings)
        srv = UvicornThread(create_app(s, policy=policy, searcher=hotpot_store)).__enter__()
        started.append((srv, policy))
        return srv, policy

    started: list = []
    yield start
    for srv, policy in started:
        policy.gate.set()
        srv.__exit__(None, None, None)


def admission(srv) -> dict:
    return httpx.get(srv.url + "/health", timeout=10).json()["admission"]


def post_in_thread(url: str, results: list, body=None, timeout: float = 120) -> threading.Thread:
    def go():
        try:
            results.append(httpx.post(url, json=body or {"input": {"question": "q?"}}, timeout=timeout))
        except httpx.HTTPError as e:
            results.append(e)

    t = threading.Thread(target=go, daemon=True)
    t.start()
    return t


def hold_the_slot(srv, results: list, url: str | None = None) -> threading.Thread:
    """A request (to ``url``, the graph's invoke by default) in a thread, once it holds the server's
    one slot (its answer lands in ``results`` when the policy's gate opens)."""
    first = post_in_thread(url or srv.url + "/parallelsearch/invoke", results)
    wait_for(lambda: admission(srv)["in_flight"] == 1, "the first request holding the slot")
    return first


@needs_data
def test_a_full_queue_is_a_429_with_retry_after_and_config_hash_calls_count(gated):
    srv, policy = gated(server_queue_size=1, server_queue_timeout_s=60)
    hashed = srv.url + HASH_PATH.format(h=config_hash({"configurable": {"top_k": 1}}), op="invoke")
    results: list = []
    first = hold_the_slot(srv, results, hashed)  # a config-hash call takes the one slot
    second = post_in_thread(srv.url + "/parallelsearch/invoke", results)
    wait_for(lambda: admission(srv)["waiting"] == 1, "the second request waiting in the queue")
    for url in (srv.url + "/parallelsearch/invoke", hashed.replace("/invoke", "/stream")):
        r = httpx.post(url, json={"input": {"question": "q?"}}, timeout=30)
        assert r.status_code == 429 and "queue of 1 is full" in r.json()["detail"]
        assert int(r.headers["Retry-After"]) >= 1
    policy.gate.set()
    first.join(60), second.join(60)
    assert [r.status_code for r in results] == [200, 200]
    assert admission(srv)["in_flight"] == 0 and admission(srv)["refused_full"] == 2


@needs_data
def test_an_expired_wait_is_a_429_with_retry_after(gated):
    srv, policy = gated(server_queue_size=8, server_queue_timeout_s=0.3)
    results: list = []
    first = hold_the_slot(srv, results)
    r = httpx.post(srv.url + "/sequential/invoke", json={"input": {"question": "q?"}}, timeout=30)
    assert r.status_code == 429 and "waited 0.3 s in the queue" in r.json()["detail"]
    assert int(r.headers["Retry-After"]) >= 1
    policy.gate.set()
    first.join(60)
    assert results[0].status_code == 200 and admission(srv)["refused_expired"] == 1


@needs_data
def test_a_client_that_leaves_the_queue_frees_its_place(gated):
    srv, policy = gated(server_queue_size=8, server_queue_timeout_s=60)
    results: list = []
    first = hold_the_slot(srv, results)
    leaver: list = []
    post_in_thread(srv.url + "/parallelsearch/invoke", leaver, timeout=0.5).join(30)
    assert isinstance(leaver[0], httpx.TimeoutException)
    wait_for(lambda: admission(srv)["gone"] == 1 and admission(srv)["waiting"] == 0, "the queue dropping it")
    policy.gate.set()
    first.join(60)
    assert results[0].status_code == 200
    assert admission(srv)["in_flight"] == 0 and admission(srv)["admitted"] == 1
