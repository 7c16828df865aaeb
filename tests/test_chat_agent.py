"""The agent in a chat UI: the conversation is the record, the stream is clean, system prompts
and the thread's history reach the model, LangChain's own middleware run where ``create_agent``
runs them. A real ``ChatOpenAI`` talks to a local OpenAI-compatible TEST SERVER (tests/servers.py:
no LLM runs here) that answers with scripted parallel tool calls and records every request."""

from __future__ import annotations

import asyncio

import pytest
from chat_stand_in import Films
from conftest import UvicornThread
from langchain.agents.middleware import AgentMiddleware
from langchain_core.messages import AIMessage, AIMessageChunk, HumanMessage, SystemMessage, ToolMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command

from parallelsearch import create_parallel_search_agent
from parallelsearch.cli.ask_events import event_lines, run_events
from parallelsearch.graphs.record import Episode

pytest.importorskip("langchain_openai", reason="langchain-openai is in the dev extra")


@pytest.fixture
def chat():
    """A ChatOpenAI against the local test server of ``script``; the server's recorded requests."""
    from langchain_openai import ChatOpenAI
    from servers import make_openai_chat_test_server

    threads: list[UvicornThread] = []

    def make(script):
        app = make_openai_chat_test_server(script)
        srv = UvicornThread(app).__enter__()
        threads.append(srv)
        model = ChatOpenAI(model="m", base_url=srv.url + "/v1", api_key="sk-test", timeout=10, max_retries=0)
        return model, app.state.requests

    yield make
    for srv in threads:
        srv.__exit__(None, None, None)


def reviewed_agent(model, films, **kw):
    """The agent with LangChain's own reviewer on every search, and a checkpointer to resume."""
    from langchain.agents.middleware import HumanInTheLoopMiddleware

    review = HumanInTheLoopMiddleware(interrupt_on={"search": True})
    return create_parallel_search_agent(model, films, middleware=[review], checkpointer=InMemorySaver(), **kw)


def test_the_thread_is_the_conversation_and_follow_ups_see_it(chat):
    model, requests = chat([["Inception director"], "Christopher Nolan"])
    agent = create_parallel_search_agent(model, Films(), checkpointer=InMemorySaver(), name="researcher")
    thread = {"configurable": {"thread_id": "t"}}
    first = agent.invoke({"messages": [("user", "Who directed Inception?")]}, thread)
    types = [m.type for m in first["messages"]]
    assert types == ["human", "ai", "tool", "ai"]
    ai, tool, final = first["messages"][1:]
    assert (
        ai.tool_calls[0]["args"] == {"query": "Inception director"}
        and tool.tool_call_id == ai.tool_calls[0]["id"]
    )
    assert tool.content.startswith("Doc 1(Title: Inception Director) all about Inception director")
    assert final.content == "Christopher Nolan" and final.name == "researcher"
    assert final.usage_metadata and final.response_metadata["status"] == "answered"
    agent.invoke({"messages": [("user", "Where was he born?")]}, thread)
    asked = [r for r in requests if r["messages"][-1].get("content") == "Where was he born?"][0]
    roles = [m["role"] for m in asked["messages"]]
    # the system message, then the whole first exchange, then the follow-up question
    assert roles == ["system", "user", "assistant", "tool", "assistant", "user"]
    assert asked["messages"][1]["content"] == "Who directed Inception?"


def test_history_is_bounded_by_messages_or_tokens(chat):
    model, requests = chat([["q"], "a"])
    agent = create_parallel_search_agent(model, Films(), checkpointer=InMemorySaver(), max_history_messages=4)
    thread = {"configurable": {"thread_id": "t"}}
    for q in ("one?", "two?", "three?"):
        agent.invoke({"messages": [("user", q)]}, thread)
    last = [r for r in requests if r["messages"][-1].get("content") == "three?"][0]
    # four earlier messages at most, starting at a question: the second exchange only
    assert [m.get("content") for m in last["messages"] if m["role"] == "user"] == ["two?", "three?"]
    per_request = {"configurable": {"thread_id": "t", "max_history_messages": 0}}
    agent.invoke({"messages": [("user", "four?")]}, per_request)
    assert [m["role"] for m in requests[-2]["messages"]] == ["system", "user"]


def test_system_prompts_reach_the_model_as_one_system_message_with_the_protocol(chat):
    model, requests = chat([["x"], "y"])
    agent = create_parallel_search_agent(model, Films(), system_prompt=SystemMessage("You answer in French."))
    agent.invoke({"messages": [SystemMessage("Be brief."), HumanMessage("Who?")]})
    system = requests[0]["messages"][0]
    assert system["role"] == "system" and [m["role"] for m in requests[0]["messages"]].count("system") == 1
    assert system["content"].startswith("You answer in French.\n\nBe brief.\n\nAnswer the given question.")
    assert "Question:" not in system["content"] and requests[0]["messages"][1]["content"] == "Who?"


def test_the_messages_stream_is_the_models_chunks_and_the_tool_messages(chat):
    model, _ = chat([["Inception director", "Inception year"], "Christopher Nolan in 2010"])
    agent = create_parallel_search_agent(model, Films())

    async def run() -> tuple[list, dict]:
        got, final = [], {}
        async for mode, chunk in agent.astream(
            {"messages": [("user", "Who directed Inception, and when?")]}, stream_mode=["messages", "values"]
        ):
            if mode == "messages":
                got.append(chunk[0])
            else:
                final = chunk
        return got, final

    got, final = asyncio.run(run())
    assert {type(m) for m in got} <= {AIMessageChunk, ToolMessage}
    assert not any("Answer the given question" in str(m.content) for m in got)  # no internal prompt
    tools = [m for m in got if isinstance(m, ToolMessage)]
    assert len(tools) == 2
    answer = final["messages"][-1]
    streamed = "".join(str(m.content) for m in got if isinstance(m, AIMessageChunk) and m.id == answer.id)
    assert streamed == answer.content == "Christopher Nolan in 2010"  # one id: no second copy


def test_updates_show_the_plan_before_the_search(chat):
    model, _ = chat([["a", "b"], "done"])
    agent = create_parallel_search_agent(model, Films())
    updates = list(agent.stream({"messages": [("user", "a and b?")]}, stream_mode="updates"))
    nodes = [node for update in updates for node in update]
    assert nodes == ["model", "tools", "model"]  # create_agent's names; opening the episode is internal
    searched = updates[1]["tools"]
    assert [m.type for m in searched["messages"]] == ["tool", "tool"] and len(searched["results"]) == 2


def test_human_review_approves_edits_and_rejects_sub_queries(chat):
    model, requests = chat([["Inception director", "Inception budget", "Inception year"], "Nolan, 2010"])
    films = Films()
    agent = reviewed_agent(model, films)
    thread = {"configurable": {"thread_id": "review"}}
    paused = agent.invoke({"messages": [("user", "Who directed Inception, and when?")]}, thread)
    (request,) = paused["__interrupt__"]
    actions = request.value["action_requests"]
    assert [a["name"] for a in actions] == ["search"] * 3 and films.queries == []  # nothing searched yet
    assert actions[0]["args"] == {"query": "Inception director"}
    decisions = [
        {"type": "approve"},
        {"type": "reject", "message": "not needed"},
        {"type": "edit", "edited_action": {"name": "search", "args": {"query": "Inception release date"}}},
    ]
    out = agent.invoke(Command(resume={"decisions": decisions}), thread)
    assert sorted(films.queries) == ["Inception director", "Inception release date"]  # what really ran
    tools = {m.tool_call_id: m for m in out["messages"] if isinstance(m, ToolMessage)}
    ai = next(m for m in out["messages"] if isinstance(m, AIMessage) and m.tool_calls)
    rejected, edited = tools[ai.tool_calls[1]["id"]], tools[ai.tool_calls[2]["id"]]
    assert "not needed" in str(rejected.content)
    assert "Inception release date" in str(edited.content) and "All About Inception" not in str(
        edited.content
    )
    assert out["messages"][-1].content == "Nolan, 2010" and out["subqueries"] == 2
    # the model's next request carries one tool message per call, as the API requires
    assert sum(1 for m in requests[-1]["messages"] if m["role"] == "tool") == 3
    # the record says what ran: the reviewed search's sub-queries, the policy's kept beside them
    (search,) = Episode.from_state(out).searches
    assert search["subqueries"] == ["Inception director", "Inception release date"]
    assert search["written_subqueries"] == ["Inception director", "Inception budget", "Inception year"]


def test_an_edit_alone_is_a_review_in_the_record(chat):
    """LangChain's reviewer keeps the model's call in the message and swaps in the edit when the
    call runs: the record still says which query ran, and which the policy wrote."""
    model, _ = chat([["Inception director", "Inception year"], "Nolan, 2010"])
    films = Films()
    agent = reviewed_agent(model, films)
    thread = {"configurable": {"thread_id": "edit"}}
    agent.invoke({"messages": [("user", "Who directed Inception, and when?")]}, thread)
    edit = {"type": "edit", "edited_action": {"name": "search", "args": {"query": "Inception release date"}}}
    out = agent.invoke(Command(resume={"decisions": [{"type": "approve"}, edit]}), thread)
    assert films.queries == ["Inception director", "Inception release date"]
    assert [e["type"] for e in out["trajectory"]] == ["turn", "review", "observation", "turn"]
    (search,) = Episode.from_state(out).searches
    assert search["subqueries"] == ["Inception director", "Inception release date"]
    assert search["written_subqueries"] == ["Inception director", "Inception year"]


def test_a_note_whose_reply_is_gone_is_not_told():
    """A middleware may drop the reply a note answers; the note then goes with it, rather than
    telling the model its newest reply was wrong."""
    from parallelsearch.graphs.conversation import with_notes

    note = HumanMessage("Your reply had no tool call and no answer.", name="parallelsearch")
    episode = [HumanMessage("q", id="h"), AIMessage("", id="a1"), AIMessage("answer", id="a2")]
    assert [m.id for m in with_notes(episode, [["a1", note]])] == ["h", "a1", None, "a2"]
    assert [m.id for m in with_notes(episode[:1] + episode[2:], [["a1", note]])] == ["h", "a2"]


def test_a_search_the_reviewer_rejects_whole_is_no_search_in_the_record(chat):
    model, _ = chat([["Inception director", "Inception budget"], "Nolan"])
    films = Films()
    agent = reviewed_agent(model, films)
    thread = {"configurable": {"thread_id": "reject"}}
    agent.invoke({"messages": [("user", "Who directed Inception?")]}, thread)
    no = {"type": "reject", "message": "answer from memory"}
    out = agent.invoke(Command(resume={"decisions": [no, no]}), thread)
    episode = Episode.from_state(out)
    assert films.queries == [] and out["subqueries"] == 0 and out["messages"][-1].content == "Nolan"
    assert episode.searches == [] and [t["action"] for t in episode.turns] == ["reviewed", "answer"]
    lines = [line for event in run_events(out) for line in event_lines(event)]
    assert lines[1] == "  [review of turn 1] 0 call(s) run, 2 answered by the reviewer"


def test_dependent_sub_queries_run_inside_the_reviewers_middleware_as_resolved(chat):
    """Under the dag graph a ``#k`` call of a later stage reaches ``wrap_tool_call`` middleware
    with the query it resolved to, and its tool message says what it was searched as."""
    from langchain.agents.middleware import HumanInTheLoopMiddleware

    model, _ = chat([["county of Van Hook", "seat of #1"], "done"])
    films, seen = Films(), []

    class Watch(AgentMiddleware):
        async def awrap_tool_call(self, request, handler):
            seen.append(request.tool_call["args"]["query"])
            return await handler(request)

    review = HumanInTheLoopMiddleware(interrupt_on={"search": True})
    agent = create_parallel_search_agent(
        model, films, graph="dag", middleware=[review, Watch()], checkpointer=InMemorySaver()
    )
    thread = {"configurable": {"thread_id": "dag"}}
    agent.invoke({"messages": [("user", "What is the seat of the county of Van Hook?")]}, thread)
    out = agent.invoke(Command(resume={"decisions": [{"type": "approve"}] * 2}), thread)
    tools = [m for m in out["messages"] if isinstance(m, ToolMessage)]
    assert films.queries == seen == ["county of Van Hook", "seat of County Of Van Hook"]
    assert [m.status for m in tools] == ["success", "success"] and out["errors"] == 0
    assert str(tools[1].content).startswith("Searched as: seat of County Of Van Hook\nDoc 1(Title: Seat Of")


def test_model_call_limit_and_retry_middleware_work_unchanged(chat):
    from langchain.agents.middleware import ModelCallLimitMiddleware, ModelRetryMiddleware

    model, requests = chat([["a"], ["b"], ["c"], "never"])
    limited = create_parallel_search_agent(
        model, Films(), middleware=[ModelCallLimitMiddleware(run_limit=2, exit_behavior="end")]
    )
    out = limited.invoke({"messages": [("user", "q?")]})
    assert out["policy_calls"] == 2 and out["status"] == "unanswered"
    assert "limit" in str(out["messages"][-1].content).lower() and out["messages"][-1].type == "ai"

    from langchain_core.language_models.fake_chat_models import FakeListChatModel

    class FailOnce(FakeListChatModel):
        failed: bool = False

        async def _agenerate(self, *args, **kwargs):
            if not self.failed:
                self.failed = True
                raise RuntimeError("provider hiccup")
            return await super()._agenerate(*args, **kwargs)

    retried = create_parallel_search_agent(
        FailOnce(responses=["<answer> fine </answer>"]),
        Films(),
        protocol="tags",
        middleware=[ModelRetryMiddleware(max_retries=2, initial_delay=0.0, jitter=False)],
    )
    assert asyncio.run(retried.ainvoke({"question": "q?"}))["answer"] == "fine"


def test_front_door_mistakes_get_did_you_mean_and_reasons():
    with pytest.raises(TypeError, match="unexpected keyword 'k'.*did you mean 'top_k'"):
        create_parallel_search_agent("oracle", Films(), k=3)
    with pytest.raises(ValueError, match="response_format= needs a chat model speaking the tools protocol"):
        create_parallel_search_agent("oracle", Films(), response_format=dict)
    with pytest.raises(ValueError, match="unknown node to interrupt at 'tool'"):
        create_parallel_search_agent("oracle", Films(), interrupt_before=["tool"])
    with pytest.raises(TypeError, match="AgentMiddleware objects"):
        create_parallel_search_agent("oracle", Films(), middleware=[object()])
    agent = create_parallel_search_agent(
        "oracle", Films(), interrupt_before=["tools"], checkpointer=InMemorySaver()
    )
    thread = {"configurable": {"thread_id": "i"}}
    meta = {"golden_answers": ["x"], "supporting_titles": ["a", "b"], "split": "parallel"}
    agent.invoke({"question": "a or b?", "metadata": meta}, thread)
    assert agent.get_state(thread).next == ("tools",)  # paused before the searches


def test_the_chat_page_script_runs_verbatim(monkeypatch, capsys):
    """docs/chat-agent.md's chat example (memory, a system prompt, human review, streaming; at most 20
    lines), unchanged: ChatOpenAI finds the local test server through OPENAI_BASE_URL."""
    import re

    from conftest import ROOT
    from servers import make_openai_chat_test_server

    section = (
        (ROOT / "docs" / "chat-agent.md")
        .read_text()
        .split("## A chat agent (LangGraph users start here)", 1)[1]
    )
    code = re.search(r"```python[^\n]*\n(.*?)```", section, re.S).group(1)
    assert len([line for line in code.splitlines() if line.strip()]) <= 20, code
    app = make_openai_chat_test_server(
        [["Inception director", "Inception release"], "Christopher Nolan, in 2010."]
    )
    with UvicornThread(app) as srv:
        monkeypatch.setenv("OPENAI_BASE_URL", srv.url + "/v1")
        monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
        exec(compile(code, "docs/chat-agent.md", "exec"), {"__name__": "docs"})
    printed = capsys.readouterr().out
    assert printed.count("searching: ['Inception director', 'Inception release']") == 2
    assert printed.count("Christopher Nolan, in 2010.") == 2  # streamed, token by token, twice
    second = [r for r in app.state.requests if r["messages"][-1].get("content") == "Where was he born?"][0]
    assert second["messages"][0]["content"].startswith("Answer in one short sentence.")
    assert [m["role"] for m in second["messages"]].count("tool") == 2  # the first exchange, remembered


def test_under_tags_messages_hold_the_question_and_the_answer_under_the_streamed_id():
    """A chat model speaking the paper's tags: the policy reads the paper's text, the thread's
    messages show the question and the answer, and the answer replaces the streamed turn by id."""
    from langchain_core.language_models.fake_chat_models import FakeListChatModel

    model = FakeListChatModel(
        responses=["<think> t </think><search> a ## b </search>", "<think> t </think><answer> yes </answer>"]
    )
    agent = create_parallel_search_agent(model, Films(), protocol="tags")

    async def run() -> tuple[list, dict]:
        got, final = [], {}
        async for mode, chunk in agent.astream(
            {"messages": [("user", "a and b?")]}, stream_mode=["messages", "values"]
        ):
            got.append(chunk[0]) if mode == "messages" else final.update(chunk)
        return got, final

    got, final = asyncio.run(run())
    assert [m.type for m in final["messages"]] == ["human", "ai"] and final["messages"][-1].content == "yes"
    assert "<search> a ## b </search>" in final["transcript"]  # the paper's text is what the policy read
    answer_id = final["messages"][-1].id
    streamed = [m for m in got if isinstance(m, AIMessageChunk)]
    assert streamed and streamed[-1].id == answer_id  # a UI merging by id shows the answer once
    assert not any(isinstance(m, HumanMessage) for m in got)  # the internal prompt is never a message


def test_history_drops_a_partly_answered_search_with_all_its_tool_messages():
    """A chat API refuses a tool call without its answer and an answer without its call, so a
    search whose calls were not all answered leaves the history whole: call and answers."""
    from langchain_core.messages import ToolMessage

    from parallelsearch.graphs.config import GraphConfig
    from parallelsearch.graphs.conversation import bounded_history

    calls = [{"name": "search", "args": {"query": q}, "id": i} for q, i in (("x", "c1"), ("y", "c2"))]
    history = [
        HumanMessage("q1", id="h1"),
        AIMessage("", id="a1", tool_calls=calls),
        ToolMessage("rejected by the reviewer", tool_call_id="c1", status="error"),
        AIMessage("an answer", id="a2"),
        HumanMessage("q2", id="h2"),
    ]
    kept = bounded_history(history, GraphConfig())
    assert [m.id for m in kept if not isinstance(m, ToolMessage)] == ["h1", "a2", "h2"]
    assert not [m for m in kept if isinstance(m, ToolMessage)]


def test_a_corrective_note_reaches_the_model_but_never_the_chat(chat):
    """A reply with neither a call nor an answer gets the environment's note: the model reads it
    right after that reply, while ``messages`` and the ``messages`` stream hold no note."""
    model, requests = chat(["", ["Inception director"], "Christopher Nolan"])
    agent = create_parallel_search_agent(model, Films(), checkpointer=InMemorySaver())
    thread = {"configurable": {"thread_id": "notes"}}
    streamed = [
        m
        for m, _ in agent.stream(
            {"messages": [("user", "Who directed Inception?")]}, thread, stream_mode="messages"
        )
    ]
    state = agent.get_state(thread).values
    assert state["messages"][-1].content == "Christopher Nolan"
    for shown in (state["messages"], streamed):
        assert not [m for m in shown if m.type == "human" and m.content != "Who directed Inception?"]
    retried = [m["role"] for m in requests[1]["messages"]]
    assert (
        retried == ["system", "user", "assistant", "user"]
        and requests[1]["messages"][-1]["name"] == "parallelsearch"
    )
    last = requests[-1]["messages"]
    # the empty reply, its note, then the search turn with its tool message
    assert [(m["role"], bool(m.get("tool_calls"))) for m in last[2:]] == [
        ("assistant", False),
        ("user", False),
        ("assistant", True),
        ("tool", False),
    ]
    assert last[3]["name"] == "parallelsearch" and "no tool call and no answer" in last[3]["content"]
