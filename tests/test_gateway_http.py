"""The gateway's loopback option: the same sessions behind a real HTTP server on 127.0.0.1
(uvicorn in a thread), reached by LangChain's ``ChatOpenAI`` over a socket, by the session's
URL or by the session header; an unknown session is a 404 naming it."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest
from engines import SamplingParamsStandIn
from gateway_support import END, LABEL, QUESTION, Library, call, engine, run, tools_tokenizer

from parallelsearch.agents.protocol import SEARCH_TOOL
from parallelsearch.graphs.config import GraphConfig
from parallelsearch.rl.gateway.executor import GatewayExecutor
from parallelsearch.rl.gateway.factory import default_agent
from parallelsearch.rl.gateway.http import LoopbackGateway, SessionRegistry, loopback_chat_model

TWO_CALLS = f"{call('Scott Derrickson')}\n{call('Ed Wood')}{END}"


@pytest.fixture(scope="module")
def tok():
    return tools_tokenizer()


@pytest.fixture(scope="module")
def gateway():
    registry = SessionRegistry()
    server = LoopbackGateway(registry).start()
    yield registry, server
    server.stop()


def test_an_episode_over_loopback_http_is_token_exact(tok, gateway):
    registry, server = gateway
    agent = default_agent("parallel", GraphConfig(top_k=1, max_turns=2))(
        loopback_chat_model(server.url), Library()
    )
    executor = GatewayExecutor(agent, registry=registry)
    eng = engine(tok, [TWO_CALLS, "yes" + END])
    sample = run(executor.execute("", json.dumps(LABEL), SamplingParamsStandIn(logprobs=1), 4096, tok, eng))
    ids, ranges = sample["observation_tokens"], sample["action_ranges"]
    assert [ids[a:b] for a, b in ranges] == eng.outputs and ids[: ranges[0][0]] == eng.requests[0]
    assert sample["extra_logs"]["gateway_token_mismatches"].item() == 0 and sample["reward"] > 1
    assert registry.get(executor.last_session.id) is None  # closed with its episode


def test_a_session_is_reached_by_its_url_and_an_unknown_one_is_a_404(tok, gateway):
    registry, server = gateway
    sess = GatewayExecutor(None).session(SamplingParamsStandIn(), 4096, tok, engine(tok, [TWO_CALLS]))
    body = {"model": "policy", "messages": [{"role": "user", "content": QUESTION}], "tools": [SEARCH_TOOL]}

    async def ask():
        registry.open(sess)
        try:
            async with httpx.AsyncClient() as client:
                ok = await client.post(f"{server.url}/sessions/{sess.id}/v1/chat/completions", json=body)
                gone = await client.post(f"{server.url}/sessions/nope/v1/chat/completions", json=body)
                bad = await client.post(
                    f"{server.url}/sessions/{sess.id}/v1/chat/completions", json={**body, "stream": True}
                )
            return ok, gone, bad
        finally:
            registry.close(sess)

    ok, gone, bad = asyncio.run(ask())
    assert ok.status_code == 200 and ok.json()["choices"][0]["finish_reason"] == "tool_calls"
    assert [c["function"]["name"] for c in ok.json()["choices"][0]["message"]["tool_calls"]] == [
        "search",
        "search",
    ]
    assert gone.status_code == 404 and "'nope'" in gone.json()["error"]["message"]
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "stream"


def test_a_sync_model_call_over_loopback_reaches_its_session(tok, gateway):
    """``invoke`` from a sync node (a worker thread) names the current session as ``ainvoke`` does."""
    from langgraph.graph import END as DONE
    from langgraph.graph import START, MessagesState, StateGraph

    registry, server = gateway
    model = loopback_chat_model(server.url)

    def answer(state: MessagesState) -> dict:
        return {"messages": [model.invoke(state["messages"])]}

    graph = StateGraph(MessagesState)
    graph.add_node("answer", answer)
    graph.add_edge(START, "answer")
    graph.add_edge("answer", DONE)
    executor = GatewayExecutor(graph.compile(), registry=registry)
    eng = engine(tok, ["yes" + END])
    sample = run(executor.execute("", json.dumps(LABEL), SamplingParamsStandIn(logprobs=1), 4096, tok, eng))
    ids, ranges = sample["observation_tokens"], sample["action_ranges"]
    assert [ids[a:b] for a, b in ranges] == eng.outputs and ids[: ranges[0][0]] == eng.requests[0]
    assert sample["extra_logs"]["answered"].item() == 1
