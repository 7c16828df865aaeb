"""The agent as a node of a ``MessagesState`` graph, side by side with LangChain's ``create_agent`` on
the same STAND-IN chat model (tests/chat_stand_in.py: no LLM runs here): it answers the
conversation's last human question whatever node spoke last, and a supervisor graph and a handoff
graph run end to end."""

from __future__ import annotations

from typing import Annotated

import pytest
from chat_stand_in import ScriptModel, calls
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.tools import InjectedToolCallId
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import InjectedState

from parallelsearch import create_parallel_search_agent


def wiki(query: str) -> list[dict]:
    """Search the encyclopedia."""
    return [{"title": query, "text": f"the wiki on {query}"}]


QUESTION = HumanMessage("Who directed Inception?", id="q1")
HANDOFF = [
    AIMessage("", name="triage", id="a1", tool_calls=[
        {"name": "transfer_to_researcher", "args": {}, "id": "h1", "type": "tool_call"}
    ]),
    ToolMessage("Transferred to researcher", tool_call_id="h1", name="transfer_to_researcher", id="t1"),
]  # fmt: skip
CONVERSATIONS = {
    "a router's message": [QUESTION, AIMessage("Sending this to the researcher.", name="router", id="a1")],
    "a handoff call and its tool message": [QUESTION, *HANDOFF],
    "its own earlier answer": [QUESTION, AIMessage("Christopher Nolan", name="parallelsearch", id="a1")],
}


@pytest.mark.parametrize("case", sorted(CONVERSATIONS))
def test_it_answers_the_last_human_question_after_any_node_as_create_agent(case):
    from langchain.agents import create_agent

    conversation = CONVERSATIONS[case]
    replies = [calls("Inception director", tool="wiki"), "Christopher Nolan"]
    ours, theirs = ScriptModel(replies=replies), ScriptModel(replies=replies)
    out = create_parallel_search_agent(ours, [wiki]).invoke({"messages": conversation})
    ref = create_agent(theirs, [wiki]).invoke({"messages": conversation})
    assert out["answer"] == "Christopher Nolan" == ref["messages"][-1].content
    assert out["search_rounds"] == 1
    # the model reads the whole conversation, as create_agent sends it (ours adds its system message)
    assert [m.type for m in ours.seen[0][1:]] == [m.type for m in theirs.seen[0]]
    assert [m.type for m in out["messages"]] == [m.type for m in ref["messages"]]
    assert sum(m.id == QUESTION.id for m in out["messages"]) == 1  # the question is not asked twice


def test_a_conversation_without_a_human_question_is_one_clear_error():
    agent = create_parallel_search_agent(ScriptModel(replies=["x"]), [wiki])
    with pytest.raises(ValueError, match=r"holding a human message .* got 2 message\(s\) \(ai, tool\)"):
        agent.invoke({"messages": HANDOFF})


def test_a_supervisor_graph_runs_the_agent_as_its_researcher_end_to_end():
    researcher = create_parallel_search_agent(
        ScriptModel(replies=[calls("Inception director", tool="wiki"), "Christopher Nolan"]), [wiki],
        name="researcher",
    )  # fmt: skip

    def supervisor(state: MessagesState) -> dict:
        done = any(m.name == "researcher" and m.type == "ai" and not m.tool_calls for m in state["messages"])
        text = "FINISH" if done else "The researcher takes this one."
        return {"messages": [AIMessage(text, name="supervisor")]}

    def next_node(state: MessagesState) -> str:
        return END if state["messages"][-1].content == "FINISH" else "researcher"

    graph = StateGraph(MessagesState)
    graph.add_node("supervisor", supervisor)
    graph.add_node("researcher", researcher)
    graph.add_edge(START, "supervisor")
    graph.add_conditional_edges("supervisor", next_node, ["researcher", END])
    graph.add_edge("researcher", "supervisor")
    out = graph.compile().invoke({"messages": [("user", "Who directed Inception?")]})
    said = [(m.type, m.name) for m in out["messages"]]
    assert said == [
        ("human", None), ("ai", "supervisor"), ("ai", "researcher"), ("tool", "wiki"), ("ai", "researcher"),
        ("ai", "supervisor"),
    ]  # fmt: skip
    assert out["messages"][-2].content == "Christopher Nolan"


def test_a_handoff_graph_hands_the_conversation_to_the_agent_end_to_end():
    from langchain.agents import create_agent
    from langchain_core.tools import tool
    from langgraph.types import Command

    @tool("transfer_to_researcher")
    def handoff(state: Annotated[dict, InjectedState], tool_call_id: Annotated[str, InjectedToolCallId]):
        """Hand the question to the researcher."""
        done = ToolMessage(
            "Transferred to researcher", tool_call_id=tool_call_id, name="transfer_to_researcher"
        )
        return Command(
            goto="researcher", graph=Command.PARENT, update={"messages": [*state["messages"], done]}
        )

    move = AIMessage(
        "", tool_calls=[{"name": "transfer_to_researcher", "args": {}, "id": "h1", "type": "tool_call"}]
    )
    triage = create_agent(ScriptModel(replies=[move]), [handoff], name="triage")
    researcher = create_parallel_search_agent(
        ScriptModel(replies=[calls("Inception director", tool="wiki"), "Christopher Nolan"]), [wiki],
        name="researcher",
    )  # fmt: skip
    graph = StateGraph(MessagesState)
    graph.add_node("triage", triage, destinations=("researcher",))
    graph.add_node("researcher", researcher)
    graph.add_edge(START, "triage")
    graph.add_edge("researcher", END)
    out = graph.compile().invoke({"messages": [("user", "Who directed Inception?")]})
    assert [m.type for m in out["messages"]] == ["human", "ai", "tool", "ai", "tool", "ai"]
    assert out["messages"][2].content == "Transferred to researcher"
    assert out["messages"][-1].content == "Christopher Nolan" and out["messages"][-1].name == "researcher"
