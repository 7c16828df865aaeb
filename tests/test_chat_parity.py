"""The agent beside LangChain's ``create_agent`` on the same STAND-IN chat model (tests/chat_stand_in.py:
no LLM runs here): every transcript it leaves is valid for a strict provider, and where
``create_agent`` defines a behaviour (tool names, events, structured output, context schemas) the
two agents agree."""

from __future__ import annotations

import logging
from collections.abc import Sequence

from chat_stand_in import ScriptModel, calls
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langgraph.checkpoint.memory import InMemorySaver

from parallelsearch import create_parallel_search_agent
from parallelsearch.stores import Passage


class Films:
    """A searcher of one made-up passage per query (the agent, not retrieval, is tested)."""

    name = "films"

    def __init__(self) -> None:
        self.queries: list[str] = []

    async def asearch(self, query: str, k: int = 3) -> list[Passage]:
        self.queries.append(query)
        return [Passage(f"id-{query}", query.title(), f"all about {query}", 0.9, self.name)]


def unanswered(messages: Sequence[BaseMessage]) -> list[str]:
    """What a strict provider refuses: tool calls without a tool message after them, tool messages
    without a call before them (their ids)."""
    called: set[str] = set()
    answered: set[str] = set()
    problems = []
    for m in messages:
        if isinstance(m, AIMessage):
            called.update(c["id"] for c in m.tool_calls)
        elif isinstance(m, ToolMessage):
            if m.tool_call_id not in called:
                problems.append(f"orphan {m.tool_call_id}")
            answered.add(m.tool_call_id)
    return problems + [f"unanswered {c}" for c in sorted(called - answered)]


def test_a_turn_cut_at_max_turns_answers_the_calls_it_does_not_search():
    model = ScriptModel(replies=[calls("a", turn=0), calls("b", "c", turn=1)])
    agent = create_parallel_search_agent(model, Films(), max_turns=1)
    out = agent.invoke({"messages": [("user", "q?")]})
    assert unanswered(out["messages"]) == []
    closing = [m for m in out["messages"] if isinstance(m, ToolMessage)][1:]
    assert [m.tool_call_id for m in closing] == ["call_1_0", "call_1_1"]
    assert all("max_turns" in m.content and m.status == "error" and m.name == "search" for m in closing)
    assert out["messages"][-1].response_metadata["status"] == "unanswered"
    # the thread's next turn sends the model a history a strict provider accepts
    model2 = ScriptModel(replies=[calls("a", turn=0), calls("b", turn=1), "done"])
    agent2 = create_parallel_search_agent(model2, Films(), max_turns=1, checkpointer=InMemorySaver())
    thread = {"configurable": {"thread_id": "t"}}
    agent2.invoke({"messages": [("user", "q?")]}, thread)
    agent2.invoke({"messages": [("user", "again?")]}, thread)
    assert all(unanswered(seen) == [] for seen in model2.seen)


def test_a_callers_orphan_tool_messages_are_dropped_and_said_once(caplog):
    model = ScriptModel(replies=["an answer"])
    agent = create_parallel_search_agent(model, Films())
    history = [
        ToolMessage("old result", tool_call_id="gone_1"),
        ToolMessage("old result", tool_call_id="gone_2"),
        AIMessage("an earlier answer"),
        HumanMessage("q?"),
    ]
    with caplog.at_level(logging.WARNING):
        out = agent.invoke({"messages": history})
    assert [type(m).__name__ for m in model.seen[0]] == ["SystemMessage", "AIMessage", "HumanMessage"]
    assert unanswered(out["messages"]) == [] and [m.type for m in out["messages"]] == ["ai", "human", "ai"]
    said = [r for r in caplog.records if "tool call is not in the conversation" in r.getMessage()]
    assert len(said) == 1 and "gone_1" in said[0].getMessage()
