"""The LangServe app over real HTTP on loopback: RemoteRunnable, load, bad input, limits, errors."""

from __future__ import annotations

import asyncio
import json
import logging

import httpx
import pytest
from conftest import ROOT, UvicornThread, needs_data
from engines import FailingPolicy

from parallelsearch.agents.policies import ScriptedPolicy
from parallelsearch.eval import DelayedPolicy
from parallelsearch.serving.server import create_app
from parallelsearch.settings import Settings

pytestmark = needs_data

SCRIPT = [
    "<think> t </think><search> Scott Derrickson ## Ed Wood </search>",
    "<think> t </think><answer> yes </answer>",
]


@pytest.fixture(scope="module")
def server(hotpot_store):
    app = create_app(Settings(server_max_concurrency=300, server_max_batch=8, server_max_question_chars=500),
                     policy=ScriptedPolicy(SCRIPT), searcher=hotpot_store)  # fmt: skip
    with UvicornThread(app) as srv:
        yield srv


def test_remote_runnable_invoke_batch_stream_events(server):
    from langserve import RemoteRunnable

    remote = RemoteRunnable(server.url + "/parallelsearch")
    out = remote.invoke({"question": "Were Scott Derrickson and Ed Wood of the same nationality?"})
    assert out["answer"] == "yes" and out["policy_calls"] == 2 and out["subqueries"] == 2
    assert "Doc 1(Title: Scott Derrickson)" in out["transcript"] or "Scott Derrickson" in out["transcript"]
    msgs = remote.invoke({"messages": [{"type": "human", "content": "Were they both American?"}]})
    assert msgs["answer"] == "yes" and [m.type for m in msgs["messages"]] == ["human", "ai"]
    outs = remote.batch([{"question": "a?"}, {"question": "b?"}, {"question": "c?"}])
    assert [o["status"] for o in outs] == ["answered"] * 3
    chunks = list(remote.stream({"question": "q?"}))
    nodes = [next(iter(c)) for c in chunks]
    assert (
        nodes[:2] == ["begin", "planner"]
        and nodes.count("search") == 2
        and "join" in nodes
        and nodes[-1] == "answer"
    )

    async def events():
        return [e async for e in remote.astream_events({"question": "q?"}, version="v2")]

    evs = asyncio.run(events())
    assert any(e["event"] == "on_chain_end" and e.get("name") == "search" for e in evs)
    for route in ("sequential", "rag"):
        assert RemoteRunnable(f"{server.url}/{route}").invoke({"question": "q?"})["status"] in (
            "answered",
            "unanswered",
        )


def test_health_stores_schemas_docs(server):
    assert httpx.get(server.url + "/health", timeout=10).json()["status"] == "ok"
    stores = httpx.get(server.url + "/stores", timeout=30).json()["stores"]
    assert stores[0]["name"] == "hotpot" and stores[0]["count"] > 100
    schema = httpx.get(server.url + "/parallelsearch/input_schema", timeout=10).json()
    assert {"question", "metadata", "messages"} <= set(schema["$defs"]["GraphInput"]["properties"])
    assert "answer" in json.dumps(httpx.get(server.url + "/parallelsearch/output_schema", timeout=10).json())
    assert httpx.get(server.url + "/docs", timeout=10).status_code == 200
    # LangServe's playground rendered blank for these graphs; it is not served (the page is /ui)
    assert httpx.get(server.url + "/parallelsearch/playground/", timeout=10).status_code == 404


def test_load_200_concurrent_requests(server):
    async def load():
        async with httpx.AsyncClient(timeout=60) as client:

            async def one(i):
                r = await client.post(
                    server.url + "/parallelsearch/invoke", json={"input": {"question": f"question {i}?"}}
                )
                return r.status_code, r.json()

            return await asyncio.wait_for(asyncio.gather(*(one(i) for i in range(200))), timeout=240)

    results = asyncio.run(load())
    codes = [c for c, _ in results]
    assert codes == [200] * 200, {c: codes.count(c) for c in set(codes)}
    assert all(body["output"]["answer"] == "yes" for _, body in results)


@pytest.mark.parametrize(
    ("path", "body", "status", "message"),
    [
        ("/parallelsearch/invoke", b"{not json", 400, "malformed JSON"),
        ("/parallelsearch/invoke", json.dumps({"input": {"question": 7}}).encode(), 422, "must be a string"),
        (
            "/parallelsearch/invoke",
            json.dumps({"input": {"question": "  "}}).encode(),
            422,
            "must not be empty",
        ),
        (
            "/parallelsearch/invoke",
            json.dumps({"input": {"question": "x" * 501}}).encode(),
            413,
            "exceeds the limit of 500",
        ),
        (
            "/parallelsearch/invoke",
            json.dumps({"input": {"messages": [{"type": "ai", "content": "hi"}]}}).encode(),
            422,
            "ending in a human message",
        ),
        (
            "/parallelsearch/invoke",
            json.dumps({"input": "just text"}).encode(),
            422,
            "object with a 'question'",
        ),
        (
            "/parallelsearch/invoke",
            json.dumps({"input": {"question": "q", "metadata": [1]}}).encode(),
            422,
            "'metadata' must be",
        ),
        (
            "/parallelsearch/batch",
            json.dumps({"inputs": [{"question": "q"}] * 9}).encode(),
            413,
            "batch of 9",
        ),
        ("/parallelsearch/batch", json.dumps({"inputs": []}).encode(), 422, "non-empty list"),
        ("/parallelsearch/invoke", json.dumps([1, 2]).encode(), 422, "JSON object"),
        ("/nowhere/invoke", json.dumps({"input": {"question": "q"}}).encode(), 404, "Not Found"),
    ],
)
def test_bad_input_is_a_4xx_with_a_message_and_the_server_goes_on(server, path, body, status, message):
    r = httpx.post(server.url + path, content=body, headers={"content-type": "application/json"}, timeout=30)
    assert r.status_code == status and message in r.text
    ok = httpx.post(server.url + "/parallelsearch/invoke", json={"input": {"question": "q?"}}, timeout=30)
    assert ok.status_code == 200 and ok.json()["output"]["answer"] == "yes"


def test_api_key_concurrency_cap_and_error_ids(hotpot_store, caplog):
    app = create_app(Settings(server_api_key="s3cret"), policy=FailingPolicy(), searcher=hotpot_store)
    with UvicornThread(app) as srv, caplog.at_level(logging.ERROR, logger="parallelsearch.serving"):
        body = {"input": {"question": "q?"}}
        assert httpx.post(srv.url + "/parallelsearch/invoke", json=body, timeout=30).status_code == 401
        assert (
            httpx.post(
                srv.url + "/parallelsearch/invoke", json=body, headers={"X-API-Key": "wrong"}, timeout=30
            ).status_code
            == 401
        )
        assert httpx.get(srv.url + "/health", timeout=10).status_code == 200  # health stays open
        r = httpx.post(
            srv.url + "/parallelsearch/invoke", json=body, headers={"X-API-Key": "s3cret"}, timeout=30
        )
        assert r.status_code == 500 and r.json()["error_id"]
        assert r.json()["error_id"] in caplog.text

    slow = DelayedPolicy(ScriptedPolicy(SCRIPT), 0.5)
    # no queue: beyond the cap a request is refused at once (tests/test_reliability.py has the queue)
    app = create_app(
        Settings(server_max_concurrency=2, server_queue_size=0), policy=slow, searcher=hotpot_store
    )
    with UvicornThread(app) as srv:

        async def burst():
            async with httpx.AsyncClient(timeout=60) as client:
                return await asyncio.gather(
                    *(
                        client.post(
                            srv.url + "/parallelsearch/invoke", json={"input": {"question": f"q{i}?"}}
                        )
                        for i in range(6)
                    )
                )

        replies = asyncio.run(burst())
        codes = sorted(r.status_code for r in replies)
        assert codes.count(200) >= 2 and codes.count(429) >= 1 and set(codes) <= {200, 429}
        assert all(int(r.headers["retry-after"]) >= 1 for r in replies if r.status_code == 429)
        assert (
            httpx.post(
                srv.url + "/parallelsearch/invoke", json={"input": {"question": "again?"}}, timeout=60
            ).status_code
            == 200
        )


def test_langgraph_json_graphs_load(monkeypatch, hotpot_store):
    import importlib
    import sys

    spec = json.loads((ROOT / "langgraph.json").read_text())
    assert set(spec["graphs"]) == {"parallelsearch", "sequential", "rag", "dag"}
    monkeypatch.setenv("PARALLELSEARCH_CHROMA_PATH", hotpot_store.location)
    monkeypatch.setenv("PARALLELSEARCH_STORES", hotpot_store.name)
    sys.modules.pop("parallelsearch.langgraph_app", None)
    mod = importlib.import_module("parallelsearch.langgraph_app")
    for entry in spec["graphs"].values():
        module, _, attr = entry["path"].partition(":")  # module paths: found from any working directory
        assert module == "parallelsearch.langgraph_app"
        graph = getattr(mod, attr)
        out = asyncio.run(graph.ainvoke({"question": "Were Scott Derrickson and Ed Wood of the same nationality?",
                                         "metadata": {"golden_answers": ["yes"], "supporting_titles": ["Scott Derrickson", "Ed Wood"], "split": "parallel"}}))  # fmt: skip
        assert out["answer"] == "yes"


def test_a_policy_spec_string_is_built_like_the_settings_own(hotpot_store):
    """``create_app(policy="oracle")`` replaces the settings' spec: the oracle is built (and
    asks for gold answers), not passed through as a string."""
    app = create_app(
        Settings(policy="openai:m@http://127.0.0.1:9/v1"), policy="oracle", searcher=hotpot_store
    )
    with UvicornThread(app) as srv:
        health = httpx.get(srv.url + "/health", timeout=10).json()
        assert health["policy"] == "oracle", health
        r = httpx.post(
            srv.url + "/parallelsearch/invoke", json={"input": {"question": "typed in?"}}, timeout=30
        )
        assert r.status_code == 422 and "gold" in r.text, r.text
