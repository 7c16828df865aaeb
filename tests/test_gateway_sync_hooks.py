"""Gateway mode with a user's sync-only middleware, as most LangChain examples write it: the hooks
run as they do when served, for many episodes at once (a sync hook waits on its handler in a
thread of its own, so it never takes the worker threads the handler's own work needs); a sync
model call reaches the episode's session from a worker thread and refuses, in one line, on the
loop's own thread; and a stuck episode fails its sample, and enough of them stop the run."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from engines import SamplingParamsStandIn
from gateway_support import END, LABEL, KeyedEngine, Library, call, run, tools_tokenizer

from parallelsearch import create_parallel_search_agent
from parallelsearch.rl.episode import decode_tokens
from parallelsearch.rl.gateway import gateway_chat_model
from parallelsearch.rl.gateway.executor import GatewayExecutor
from parallelsearch.rl.gateway.guard import GatewayGuard, GatewayRunError

TWO_CALLS = f"{call('Scott Derrickson')}\n{call('Ed Wood')}{END}"
#: more episodes at once than any machine's default worker threads (at most 32): the old code
#: parked one sync hook per worker, each waiting on a handler that needed a worker
EPISODES = 40
MARK = "Marker: answer in one word."


@pytest.fixture(scope="module")
def tok():
    return tools_tokenizer()


def sync_marker(log: Path):
    """``before_model`` appends a line to a file; ``wrap_model_call`` adds a line to the system
    prompt and returns ``handler(request)``: sync hooks only."""
    from langchain.agents.middleware import AgentMiddleware
    from langchain_core.messages import SystemMessage

    class Marker(AgentMiddleware):
        def before_model(self, state, runtime):
            with log.open("a") as f:
                f.write("before_model\n")

        def wrap_model_call(self, request, handler):
            before = request.system_message.content if request.system_message else ""
            return handler(request.override(system_message=SystemMessage(content=f"{before}\n{MARK}")))

    return Marker()


def sync_tool_wrapper():
    from langchain.agents.middleware import AgentMiddleware

    class ToolNote(AgentMiddleware):
        def wrap_tool_call(self, request, handler):
            out = handler(request)
            out.content = f"{out.content}\n(checked)"
            return out

    return ToolNote()


def many_episodes(tok, agent, n: int = EPISODES) -> tuple[list[dict], KeyedEngine]:
    questions = [f"Were person {i} and person {i + 1} of the same nationality?" for i in range(n)]
    eng = KeyedEngine(tok, {q: [TWO_CALLS, "yes" + END] for q in questions})
    gateway = GatewayExecutor(agent)

    async def all_at_once() -> list[dict]:
        labels = [json.dumps({**LABEL, "question": q}) for q in questions]
        return await asyncio.gather(
            *(gateway.execute("", lab, SamplingParamsStandIn(logprobs=1), 4096, tok, eng) for lab in labels)
        )

    return run(all_at_once()), eng


def check_trained(samples: list[dict], tok, contains: str) -> None:
    for sample in samples:
        logs = {k: v.item() for k, v in sample["extra_logs"].items()}
        assert (logs["answered"], logs["subqueries"], logs["gateway_forks"]) == (1, 2, 0)
        assert (logs["gateway_token_mismatches"], logs["gateway_stuck"], logs["gateway_failed_closed"]) == (
            0,
            0,
            0,
        )
        ids, ranges = sample["observation_tokens"], sample["action_ranges"]
        assert len(ranges) == 2 and contains in decode_tokens(tok, ids)


@pytest.mark.timeout(300)  # the old code hung here without a word; this fails it instead
def test_sync_before_model_and_wrap_model_call_train_many_episodes_at_once(tok, tmp_path):
    log = tmp_path / "calls.log"
    agent = create_parallel_search_agent(
        gateway_chat_model(), Library(), middleware=[sync_marker(log)], top_k=1, max_turns=2
    )
    samples, _ = many_episodes(tok, agent)
    check_trained(samples, tok, MARK)  # the middleware's line is in the trained tokens
    assert log.read_text().count("before_model") == 2 * EPISODES


@pytest.mark.timeout(300)
def test_sync_wrap_tool_call_trains_many_episodes_at_once(tok):
    agent = create_parallel_search_agent(
        gateway_chat_model(), Library(), middleware=[sync_tool_wrapper()], top_k=1, max_turns=2
    )
    samples, _ = many_episodes(tok, agent)
    check_trained(samples, tok, "(checked)")  # the hook's tool messages are what the model read


def sync_node_agent(on_loop: bool):
    """A hand-written LangGraph agent whose one node calls the chat model's sync ``invoke``: from
    a sync node (a worker thread) it reaches the session; from an async node it would block the
    episode's own loop."""
    from langgraph.graph import END as DONE
    from langgraph.graph import START, MessagesState, StateGraph

    model = gateway_chat_model()

    def answer(state: MessagesState) -> dict:
        return {"messages": [model.invoke(state["messages"])]}

    async def answer_on_loop(state: MessagesState) -> dict:
        return {"messages": [model.invoke(state["messages"])]}

    graph = StateGraph(MessagesState)
    graph.add_node("answer", answer_on_loop if on_loop else answer)
    graph.add_edge(START, "answer")
    graph.add_edge("answer", DONE)
    return graph.compile()


@pytest.mark.timeout(300)
def test_a_sync_model_call_reaches_the_session_from_a_worker_thread(tok):
    eng = KeyedEngine(tok, {LABEL["question"]: ["yes" + END]})
    gateway = GatewayExecutor(sync_node_agent(on_loop=False))
    sample = run(gateway.execute("", json.dumps(LABEL), SamplingParamsStandIn(logprobs=1), 4096, tok, eng))
    ids, ranges = sample["observation_tokens"], sample["action_ranges"]
    assert [ids[a:b] for a, b in ranges] == eng.outputs and ids[: ranges[0][0]] == eng.requests[0]


@pytest.mark.timeout(300)
def test_a_sync_model_call_on_the_episode_loop_fails_at_once_naming_the_fix(tok):
    eng = KeyedEngine(tok, {LABEL["question"]: ["yes" + END]})
    gateway = GatewayExecutor(sync_node_agent(on_loop=True))
    with pytest.raises(Exception, match="on the episode's event loop.*call ainvoke"):
        run(gateway.execute("", json.dumps(LABEL), SamplingParamsStandIn(logprobs=1), 4096, tok, eng))
    assert eng.outputs == []


def test_the_run_stops_with_the_reason_once_stuck_episodes_pass_the_limit(tok):
    from langchain.agents.middleware import AgentMiddleware

    class Stalls(AgentMiddleware):
        async def awrap_tool_call(self, request, handler):
            await asyncio.Event().wait()  # never set

    agent = create_parallel_search_agent(
        gateway_chat_model(), Library(), middleware=[Stalls()], top_k=1, max_turns=2
    )
    gateway = GatewayExecutor(agent, timeout_s=0.2, guard=GatewayGuard(max_stuck=1))
    questions = ["Who directed Ed Wood?", "Who wrote Ed Wood?"]
    eng = KeyedEngine(tok, {q: [TWO_CALLS, "yes" + END] for q in questions})
    params = SamplingParamsStandIn(logprobs=1)
    labels = [json.dumps({**LABEL, "question": q}) for q in questions]
    first = run(gateway.execute("", labels[0], params, 4096, tok, eng))
    assert first["extra_logs"]["gateway_stuck"].item() == 1
    with pytest.raises(
        GatewayRunError, match=r"2 gateway episodes got stuck \(> agent.gateway_max_stuck=1\)"
    ):
        run(gateway.execute("", labels[1], params, 4096, tok, eng))


def test_the_run_stops_once_forks_pass_their_share_but_not_for_a_dynamic_prompt():
    from parallelsearch.rl.gateway import GatewayCounters

    drifting = GatewayGuard(max_fork_share=0.2, min_episodes=20)
    for _ in range(40):  # every episode's system prompt changes between calls: trained, not stopped
        drifting.record(GatewayCounters(forks=2, drifts=2))
    rewriting = GatewayGuard(max_fork_share=0.2, min_episodes=20)
    for i in range(19):
        rewriting.record(GatewayCounters(forks=int(i % 2 == 0)))  # 10 of 19: too few episodes to judge
    with pytest.raises(
        GatewayRunError, match=r"11 of 20 gateway episodes forked \(55% > agent.gateway_max_fork_share=0.2\)"
    ):
        rewriting.record(GatewayCounters(forks=1))
