"""Every request the agent sends is one a strict provider takes (every tool call answered right
after it, no tool message without its call, the first non-system message the user's), in the
cases behind the history-repair middleware other projects added (a summarization cut inside a
parallel batch, a cancel mid-call, a reviewer rejecting one of two parallel calls, duplicate
parallel calls, a structured answer beside a search call, a turn cut with calls pending) and in
1,000 random multi-turn threads mixing them. The chat models are STAND-INS (tests/chat_stand_in.py:
no LLM runs here); the middleware, the checkpointer and the graph are the real ones."""

from __future__ import annotations

import asyncio
import random
from typing import Any

import pytest
from chat_stand_in import Films, RandomChatModel, ScriptModel, calls
from langchain.agents.middleware import AgentMiddleware, HumanInTheLoopMiddleware
from langchain.agents.structured_output import ToolStrategy
from langchain_core.messages import AIMessage, HumanMessage, RemoveMessage, convert_to_openai_messages
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph.message import REMOVE_ALL_MESSAGES
from langgraph.types import Command
from pydantic import BaseModel
from servers import strict_provider_problems

from parallelsearch import create_parallel_search_agent


def problems(requests: list[list[Any]]) -> list[str]:
    """What a strict provider refuses in any of ``requests`` (each one model call's messages)."""
    out = []
    for i, messages in enumerate(requests):
        said = strict_provider_problems({"messages": convert_to_openai_messages(messages)})
        out += [f"request {i}: {p}" for p in said]
    return out


class Film(BaseModel):
    """A film and the year it came out."""

    title: str
    year: int


def wiki(query: str) -> list[dict]:
    """Search the encyclopedia."""
    return [{"title": query, "text": f"the wiki on {query}"}]


def lookup(query: str) -> str:
    """Look a query up: one line of text."""
    return f"{query}: a film."


class CutAnywhere(AgentMiddleware):
    """A summarizer that keeps a summary and the messages after a cut it makes anywhere, inside a
    parallel batch included (the field's defect): what the graph must repair before it sends."""

    def __init__(self, chance: float = 1.0, cut: int | None = None):
        super().__init__()
        self.chance, self.cut = chance, cut

    def before_model(self, state: Any, runtime: Any) -> dict[str, Any] | None:
        messages = state["messages"]
        rng = random.Random(f"{messages[0].content}:{len(messages)}")
        if len(messages) < 3 or rng.random() > self.chance:
            return None
        cut = self.cut if self.cut is not None else rng.randrange(1, len(messages))
        summary = HumanMessage(f"Summary of {cut} earlier messages.", id=f"summary-{len(messages)}-{cut}")
        return {"messages": [RemoveMessage(id=REMOVE_ALL_MESSAGES), summary, *messages[cut:]]}


def ask(agent: Any, thread: str, *questions: str) -> list[dict]:
    config = {"configurable": {"thread_id": thread}}
    return [agent.invoke({"messages": [("user", q)]}, config) for q in questions]


# -- the field's cases ----------------------------------------------------------------------------


def test_a_summarization_cut_inside_a_parallel_batch():
    model = ScriptModel(replies=[calls("a", "b", "c", turn=0), "first", calls("d", turn=1), "second"])
    agent = create_parallel_search_agent(
        model, Films(), middleware=[CutAnywhere(cut=3)], checkpointer=InMemorySaver()
    )
    ask(agent, "t", "one?", "two?")  # the cut keeps the last two tool messages of a batch of three
    assert len(model.seen) == 4 and problems(model.seen) == []


def test_a_cancel_mid_call_leaves_a_history_the_next_turn_can_send():
    entered, never = asyncio.Event(), asyncio.Event()

    async def slow(query: str) -> list[dict]:
        """Search slowly."""
        entered.set()
        await never.wait()
        return []

    model = ScriptModel(replies=[calls("a", "b"), "answer"])
    agent = create_parallel_search_agent(model, slow, checkpointer=InMemorySaver(), search_timeout_s=120)
    config = {"configurable": {"thread_id": "t"}}

    async def go() -> dict:
        run = asyncio.create_task(agent.ainvoke({"messages": [("user", "one?")]}, config))
        await asyncio.wait_for(entered.wait(), 60)
        run.cancel()
        with pytest.raises(asyncio.CancelledError):
            await run
        return await agent.ainvoke({"messages": [("user", "two?")]}, config)

    out = asyncio.run(go())
    assert out["messages"][-1].content == "answer" and problems(model.seen) == []
    assert [m.type for m in model.seen[-1][1:]] == ["human", "human"]  # the abandoned search left out


@pytest.mark.parametrize("decisions", [("approve", "reject"), ("reject", "approve"), ("reject", "reject")])
def test_a_reviewer_rejecting_one_of_two_parallel_calls(decisions):
    model = ScriptModel(replies=[calls("a", "b"), "answer", calls("c"), "again"])
    review = HumanInTheLoopMiddleware(interrupt_on={"search": True})
    agent = create_parallel_search_agent(model, Films(), middleware=[review], checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": "t"}}
    agent.invoke({"messages": [("user", "one?")]}, config)
    agent.invoke(Command(resume={"decisions": [{"type": d} for d in decisions]}), config)
    agent.invoke({"messages": [("user", "two?")]}, config)
    assert len(model.seen) >= 3 and problems(model.seen) == []


def test_duplicate_parallel_calls_are_each_answered():
    model = ScriptModel(replies=[calls("a", "a", "b"), "answer", "again"])
    agent = create_parallel_search_agent(model, Films(), checkpointer=InMemorySaver())
    first, _ = ask(agent, "t", "one?", "two?")
    answered = [m.tool_call_id for m in first["messages"] if m.type == "tool"]
    assert answered == ["call_0_0", "call_0_1", "call_0_2"] and problems(model.seen) == []


def test_a_structured_answer_beside_a_search_call():
    both = AIMessage("", tool_calls=[
        {"name": "wiki", "args": {"query": "Inception"}, "id": "s1", "type": "tool_call"},
        {"name": "Film", "args": {"title": "Inception", "year": 2010}, "id": "f1", "type": "tool_call"},
    ])  # fmt: skip
    model = ScriptModel(replies=[both, calls("x", tool="wiki", turn=1), AIMessage("", tool_calls=[
        {"name": "Film", "args": {"title": "Tenet", "year": 2020}, "id": "f2", "type": "tool_call"}])])  # fmt: skip
    agent = create_parallel_search_agent(
        model, [wiki], response_format=ToolStrategy(Film), checkpointer=InMemorySaver()
    )
    first, second = ask(agent, "t", "one?", "two?")
    assert first["structured_response"] == Film(title="Inception", year=2010)
    assert second["structured_response"] == Film(title="Tenet", year=2020) and problems(model.seen) == []


def test_a_turn_cut_with_calls_pending():
    model = ScriptModel(replies=[calls("a", turn=0), calls("b", "c", turn=1), calls("d", turn=2), "done"])
    agent = create_parallel_search_agent(model, Films(), max_turns=1, checkpointer=InMemorySaver())
    first, _ = ask(agent, "t", "one?", "two?")
    assert first["messages"][-1].response_metadata["status"] == "unanswered" and problems(model.seen) == []


def test_a_turn_cut_with_calls_pending_that_a_reviewer_rejects():
    model = ScriptModel(replies=[calls("a", turn=0), calls("b", "c", turn=1), "done"])
    review = HumanInTheLoopMiddleware(interrupt_on={"search": True})
    agent = create_parallel_search_agent(
        model, Films(), max_turns=1, middleware=[review], checkpointer=InMemorySaver()
    )
    config = {"configurable": {"thread_id": "t"}}
    agent.invoke({"messages": [("user", "one?")]}, config)
    agent.invoke(Command(resume={"decisions": [{"type": "approve"}]}), config)
    out = agent.invoke(Command(resume={"decisions": [{"type": "reject"}, {"type": "approve"}]}), config)
    answers = [m.tool_call_id for m in out["messages"] if m.type == "tool"]
    assert answers == ["call_0_0", "call_1_0", "call_1_1"]  # one answer per call, the cut turn's included
    agent.invoke({"messages": [("user", "two?")]}, config)
    assert problems(model.seen) == []


# -- random threads -------------------------------------------------------------------------------


def random_agents(model: RandomChatModel, entered: asyncio.Event) -> list[Any]:
    """The shapes the random threads run on: a lone searcher under review (whose query ``hang``
    waits to be cancelled), named tools under review of one with a structured answer, a named
    text tool with a short memory and one turn; each summarized at random."""

    async def slow(query: str) -> list[dict]:
        """Search, or wait for ``hang`` (a call cancelled mid-search)."""
        if query == "hang":
            entered.set()
            await asyncio.Event().wait()
        return [{"title": query, "text": f"about {query}"}]

    saver, cut = InMemorySaver(), CutAnywhere(chance=0.3)
    return [
        create_parallel_search_agent(
            model, slow, checkpointer=saver, max_turns=2, search_timeout_s=120,
            middleware=[HumanInTheLoopMiddleware(interrupt_on={"search": True}), cut],
        ),
        create_parallel_search_agent(
            model, [wiki, lookup], checkpointer=saver, max_turns=3, response_format=ToolStrategy(Film),
            middleware=[HumanInTheLoopMiddleware(interrupt_on={"wiki": True}), cut],
        ),
        create_parallel_search_agent(
            model, [wiki, lookup], checkpointer=saver, max_turns=1, max_history_messages=6, middleware=[cut]
        ),
    ]  # fmt: skip


def decision(rng: random.Random, request: dict, allowed: list[str]) -> dict:
    kind = rng.choice(allowed)
    if kind == "edit":
        return {"type": "edit", "edited_action": {"name": request["name"], "args": {"query": "edited"}}}
    return {"type": kind, **({"message": "not that one"} if kind in ("reject", "respond") else {})}


async def cancel_or_finish(run: asyncio.Task, entered: asyncio.Event) -> dict | None:
    """The run's result, or None when it reached a ``hang`` search and was cancelled there."""
    waiting = asyncio.ensure_future(entered.wait())
    done, _ = await asyncio.wait({run, waiting}, return_when=asyncio.FIRST_COMPLETED)
    waiting.cancel()
    if run in done:
        return run.result()
    run.cancel()
    await asyncio.gather(run, return_exceptions=True)
    entered.clear()
    return None


async def random_thread(agent: Any, n: int, entered: asyncio.Event, outcomes: dict[str, int]) -> None:
    """One thread: 1-3 questions, each reviewed with random decisions (or abandoned for the next
    question), cancelled when it searches ``hang``, structured answers refused now and then."""
    rng = random.Random(n)
    config = {"configurable": {"thread_id": f"thread-{n}"}}
    for turn in range(rng.randint(1, 3)):
        given: Any = {"messages": [("user", f"question {turn} of thread {n}?")]}
        while given is not None:
            try:
                out = await cancel_or_finish(asyncio.create_task(agent.ainvoke(given, config)), entered)
            except Exception as e:  # noqa: BLE001 - a refused structured answer ends the run, as in create_agent
                outcomes[type(e).__name__] = outcomes.get(type(e).__name__, 0) + 1
                break
            pause = (out or {}).get("__interrupt__")
            outcomes["cancelled" if out is None else "paused" if pause else "done"] += 1
            if not pause or rng.random() < 0.2:  # done, cancelled, or a pause left for the next question
                break
            value = pause[0].value
            picks = [
                decision(rng, r, c["allowed_decisions"])
                for r, c in zip(value["action_requests"], value["review_configs"], strict=True)
            ]
            given = Command(resume={"decisions": picks})


def test_a_thousand_random_threads_send_only_what_a_strict_provider_takes():
    model = RandomChatModel(seed=7)

    async def go() -> dict[str, int]:
        entered = asyncio.Event()
        agents = random_agents(model, entered)
        outcomes = {"done": 0, "paused": 0, "cancelled": 0}
        for n in range(1000):
            await random_thread(agents[n % len(agents)], n, entered, outcomes)
        return outcomes

    outcomes = asyncio.run(go())
    found = problems(model.seen)
    assert found == [], f"{len(found)} violations in {len(model.seen)} requests: {found[:5]}"
    assert len(model.seen) > 2000 and min(outcomes["done"], outcomes["paused"], outcomes["cancelled"]) > 20, (
        outcomes
    )
