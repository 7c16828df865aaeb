"""Conversation memory: a thread's earlier turns reach the model under every protocol (under the
tags protocol, written into its prompt), history trimming keeps the newest messages that fit with
each search's calls and results together (LangChain's ``trim_messages(strategy="last")`` where
the history has no searches), and a misspelt per-request key is refused by name. The models are
STAND-INS: a local OpenAI-compatible completions TEST SERVER (tests/servers.py) and the scripted
chat model of tests/chat_stand_in.py; no LLM runs here."""

from __future__ import annotations

import pytest
from chat_stand_in import Films, ScriptModel, calls
from conftest import UvicornThread
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage, trim_messages
from langchain_core.messages.utils import count_tokens_approximately
from langgraph.checkpoint.memory import InMemorySaver

from parallelsearch import create_parallel_search_agent
from parallelsearch.agents.policies.spec import policy_from_spec
from parallelsearch.agents.protocol import render_prompt
from parallelsearch.graphs.builders import build_parallel_search_graph
from parallelsearch.graphs.config import GraphConfig
from parallelsearch.graphs.conversation import bounded_history, orphan_tool_messages

TAGS_TURNS = ["<think> look it up </think><search> Inception director </search>", "<answer> Christopher Nolan </answer>"]  # fmt: skip


@pytest.fixture(scope="module")
def completions():
    """The completions TEST SERVER a tags policy (``openai:MODEL@URL``, the Serving example's
    policy) talks to; its recorded request bodies."""
    from servers import make_openai_test_server

    app = make_openai_test_server(TAGS_TURNS)
    with UvicornThread(app) as srv:
        yield f"openai:m@{srv.url}/v1", app.state.requests


def prompts_for(requests: list[dict], question: str) -> list[str]:
    return [r["prompt"] for r in requests if f"Question: {question}\n" in r["prompt"]]


def test_a_tags_thread_shows_the_model_its_earlier_turns(completions):
    spec, requests = completions
    graph = build_parallel_search_graph(policy_from_spec(spec), Films(), checkpointer=InMemorySaver())
    thread = {"configurable": {"thread_id": "tags-memory"}}
    assert graph.invoke({"question": "Who directed Inception?"}, thread)["answer"] == "Christopher Nolan"
    graph.invoke({"question": "Where was he born?"}, thread)
    first = prompts_for(requests, "Who directed Inception?")[0]
    assert first == render_prompt("Who directed Inception?")  # no history: the paper's prompt, byte for byte
    follow_up = prompts_for(requests, "Where was he born?")[0]
    assert follow_up.startswith(render_prompt("x").split("Question: ")[0])
    assert follow_up.endswith(
        "The conversation so far (the question may refer to it):\n"
        "User: Who directed Inception?\nAssistant: Christopher Nolan\nQuestion: Where was he born?\n"
    )


def test_a_tags_conversation_sent_as_messages_reaches_the_prompt_bounded(completions):
    """A chat UI's whole conversation without a thread: the earlier messages are the history, with
    the chat protocols' bounds."""
    spec, requests = completions
    graph = build_parallel_search_graph(policy_from_spec(spec), Films(), max_history_messages=2)
    said = [("user", "Who wrote Dune?"), ("assistant", "Frank Herbert"), ("user", "Who directed Inception?")]
    graph.invoke({"messages": [*said, ("assistant", "Christopher Nolan"), ("user", "And his birthplace?")]})
    prompt = prompts_for(requests, "And his birthplace?")[0]
    assert (
        "User: Who directed Inception?\nAssistant: Christopher Nolan\nQuestion: And his birthplace?" in prompt
    )
    assert "Dune" not in prompt  # over max_history_messages: the newest exchange only


def exchange(n: int, queries: int, answer: str = "") -> list:
    """One turn of a chat thread: the question, a search of ``queries`` calls with their results,
    the answer."""
    ai = calls(*[f"q{n}.{i}" for i in range(queries)], turn=n)
    tools = [ToolMessage(f"result {c['id']}", tool_call_id=c["id"]) for c in ai.tool_calls]
    return [
        HumanMessage(f"question {n}?", id=f"h{n}"),
        ai,
        *tools,
        AIMessage(answer or f"answer {n}", id=f"a{n}"),
    ]


def test_a_turn_longer_than_the_bound_leaves_the_next_its_question_and_answer():
    """Two parallel calls make a turn of five messages; a bound of four keeps its question and
    answer (the search, calls and results together, does not fit) instead of nothing."""
    model = ScriptModel(replies=[calls("Inception director", "Inception year"), "Christopher Nolan in 2010"])
    agent = create_parallel_search_agent(model, Films(), checkpointer=InMemorySaver(), max_history_messages=4)
    thread = {"configurable": {"thread_id": "long-turn"}}
    agent.invoke({"messages": [("user", "Who directed Inception, and when?")]}, thread)
    model.replies[:] = ["London"]
    agent.invoke({"messages": [("user", "Where was he born?")]}, thread)
    sent = model.seen[-1]
    assert [type(m).__name__ for m in sent] == ["SystemMessage", "HumanMessage", "AIMessage", "HumanMessage"]
    assert [m.content for m in sent[1:]] == ["Who directed Inception, and when?", "Christopher Nolan in 2010", "Where was he born?"]  # fmt: skip


def test_trimming_keeps_the_newest_searches_that_fit_whole():
    history = [*exchange(1, 1), *exchange(2, 3)]  # 4 + 6 messages
    kept = bounded_history(history, GraphConfig(max_history_messages=9))
    # turn 2 whole (6), then turn 1's question and answer (2); its search (2) would make 10
    assert [m.id or m.tool_call_id for m in kept if not isinstance(m, AIMessage) or m.id] == [
        "h1", "a1", "h2", "call_2_0", "call_2_1", "call_2_2", "a2",
    ]  # fmt: skip
    one_search = bounded_history([*exchange(1, 1), *exchange(2, 1), *exchange(3, 2)], GraphConfig(max_history_messages=7))  # fmt: skip
    assert [type(m).__name__ for m in one_search] == ["HumanMessage", "AIMessage", "HumanMessage", "AIMessage", "ToolMessage", "ToolMessage", "AIMessage"]  # fmt: skip


@pytest.mark.parametrize("bound", range(0, 14))
@pytest.mark.parametrize("by", ["messages", "tokens"])
def test_every_trimmed_history_is_valid_for_a_strict_provider_and_within_its_bound(bound, by):
    history = [*exchange(1, 2), *exchange(2, 1), HumanMessage("question 3?", id="h3"), AIMessage("a3", id="a3"), *exchange(4, 3)]  # fmt: skip
    cfg = (
        GraphConfig(max_history_messages=bound)
        if by == "messages"
        else GraphConfig(max_history_tokens=bound * 12)
    )
    kept = bounded_history(history, cfg)
    size = len(kept) if by == "messages" else count_tokens_approximately(kept)
    assert size <= (bound if by == "messages" else bound * 12)
    assert not kept or isinstance(kept[0], HumanMessage)
    assert not orphan_tool_messages(kept)
    answered = {m.tool_call_id for m in kept if isinstance(m, ToolMessage)}
    assert all(c["id"] in answered for m in kept if isinstance(m, AIMessage) for c in m.tool_calls)
    assert [m for m in history if m in kept] == kept  # in order, nothing made up
    if bound >= 2 and by == "messages":  # the newest question and answer always fit two messages
        assert [m.id for m in kept if isinstance(m, HumanMessage)][-1] == "h4" and kept[-1].id == "a4"


@pytest.mark.parametrize("bound", range(0, 9))
def test_a_history_without_searches_is_trimmed_as_langchains_trim_messages(bound):
    """Where no search is in the way, the newest messages that fit are LangChain's
    ``trim_messages(strategy="last", start_on="human")``, by message count and by tokens."""
    history = [
        HumanMessage("Who wrote Dune?"),
        AIMessage("Frank Herbert, in 1965."),
        HumanMessage("And its sequel?"),
        AIMessage("Dune Messiah"),
        HumanMessage("Who directed the 2021 film of the first book, and who scored it?"),
        AIMessage("Denis Villeneuve directed it and Hans Zimmer scored it."),
        HumanMessage("Thanks"),
        AIMessage("You are welcome."),
    ]
    ours = bounded_history(history, GraphConfig(max_history_messages=bound))
    theirs = trim_messages(history, max_tokens=bound, token_counter=len, strategy="last", start_on="human")
    assert ours == theirs
    tokens = bound * 9
    ours = bounded_history(history, GraphConfig(max_history_tokens=tokens))
    theirs = trim_messages(
        history,
        max_tokens=tokens,
        token_counter=count_tokens_approximately,
        strategy="last",
        start_on="human",
    )
    assert ours == theirs


def test_a_misspelt_per_request_key_is_refused_naming_the_knob_it_meant():
    agent = create_parallel_search_agent(ScriptModel(replies=["Paris"]), Films())
    question = {"messages": [("user", "Capital of France?")]}
    with pytest.raises(
        ValueError, match=r"context key 'topk' is not a per-request knob \(did you mean 'top_k'\?\)"
    ):
        agent.invoke(question, context={"topk": 2})
    with pytest.raises(ValueError, match=r"configurable key 'maxTurns' .*did you mean 'max_turns'"):
        agent.invoke(question, {"configurable": {"maxTurns": 2}})
    # keys that are no knob's misspelling pass through: a parent graph's, a configurable field's
    reply = agent.invoke(
        question, {"configurable": {"max_tokens": 9, "user_id": "u"}}, context={"tenant": "t"}
    )
    assert reply["messages"][-1].content == "Paris"
    assert agent.invoke(question, context={"top_k": 2})["answer"] == "Paris"


def test_system_messages_stay_out_of_a_text_protocols_history(completions):
    spec, requests = completions
    graph = build_parallel_search_graph(policy_from_spec(spec), Films())
    graph.invoke({"messages": [SystemMessage("Be brief."), ("user", "Who wrote Dune?"), ("assistant", "Herbert"), ("user", "When?")]})  # fmt: skip
    prompt = prompts_for(requests, "When?")[0]
    assert (
        "(the question may refer to it):\nUser: Who wrote Dune?\nAssistant: Herbert\nQuestion: When?"
        in prompt
    )
    assert prompt.startswith("Be brief.\n\n") and prompt.count("Be brief") == 1  # the system text, once
