"""The agent beside LangChain's ``create_agent`` on the same STAND-IN chat model (tests/chat_stand_in.py:
no LLM runs here): every transcript it leaves is valid for a strict provider, and where
``create_agent`` defines a behaviour (tool names, events, structured output, context schemas) the
two agents agree."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

from chat_stand_in import Films, ScriptModel, calls
from conftest import needs_data
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langgraph.checkpoint.memory import InMemorySaver
from pydantic import BaseModel

from parallelsearch import create_parallel_search_agent


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
    # what is left of the cut window is no history a provider takes first: the request starts at the question
    assert [type(m).__name__ for m in model.seen[0]] == ["SystemMessage", "HumanMessage"]
    assert unanswered(out["messages"]) == [] and [m.type for m in out["messages"]] == ["ai", "human", "ai"]
    said = [r for r in caplog.records if "tool call is not in the conversation" in r.getMessage()]
    assert len(said) == 1 and "gone_1" in said[0].getMessage()


def both(replies: list, tools: list, own: dict | None = None, **kw):
    """This agent and ``create_agent`` over ``tools``, each on its own copy of the scripted model
    (``own``: keywords only this agent takes)."""
    from langchain.agents import create_agent

    ours, theirs = ScriptModel(replies=replies), ScriptModel(replies=replies)
    return (
        (create_parallel_search_agent(ours, tools, **kw, **(own or {})), ours),
        (create_agent(theirs, tools, **kw), theirs),
    )


def wiki(query: str) -> list[dict]:
    """Search the encyclopedia: facts about people, places and works."""
    return [{"title": query, "text": f"the wiki on {query}"}]


def web(query: str) -> list[dict]:
    """Search the web: news and recent events."""
    return [{"title": query, "text": f"the web on {query}"}]


def wiki_and_web_calls() -> AIMessage:
    """One message calling both named searchers (a round of two sub-queries)."""
    return AIMessage("", tool_calls=[
        {"name": "wiki", "args": {"query": "Inception"}, "id": "c1", "type": "tool_call"},
        {"name": "web", "args": {"query": "Nolan news"}, "id": "c2", "type": "tool_call"},
    ])  # fmt: skip


def test_named_searchers_are_tools_of_their_own_as_create_agent_shows_them():
    from langchain_core.utils.function_calling import convert_to_openai_tool

    two = wiki_and_web_calls()
    (ours, our_model), (theirs, their_model) = both([two, "Nolan"], [wiki, web])
    out = ours.invoke({"messages": [("user", "Who?")]})
    ref = theirs.invoke({"messages": [("user", "Who?")]})
    assert our_model.tools[0] == their_model.tools[0] == ["wiki", "web"]
    sent = [t["function"] for t in our_model._kwargs[0]["tools"]]
    assert [(t["name"], t["description"]) for t in sent] == [
        (convert_to_openai_tool(f)["function"]["name"], convert_to_openai_tool(f)["function"]["description"])
        for f in (wiki, web)
    ]
    tool_msgs = [m for m in out["messages"] if isinstance(m, ToolMessage)]
    ref_msgs = [m for m in ref["messages"] if isinstance(m, ToolMessage)]
    assert [(m.name, m.tool_call_id) for m in tool_msgs] == [(m.name, m.tool_call_id) for m in ref_msgs]
    assert "the wiki on Inception" in tool_msgs[0].content and "the web on Nolan news" in tool_msgs[1].content
    obs = [t for t in out["trajectory"] if t["type"] == "observation"][0]
    assert [r["query"] for r in obs["results"]] == ["wiki: Inception", "web: Nolan news"]  # who ran each
    assert [r["passages"][0]["store"] for r in obs["results"]] == ["wiki", "web"]
    assert out["answer"] == "Nolan" and out["subqueries"] == 2 and out["search_rounds"] == 1


def waiting_pair_agent():
    """An agent with two named searchers that each wait for the other (a sequential run of one
    round's calls never gets past them), and a model that calls both in one message."""
    import asyncio

    barrier = asyncio.Barrier(2)

    async def films(query: str) -> list[dict]:
        """Films."""
        await asyncio.wait_for(barrier.wait(), 60)
        return [{"title": query, "text": "a film"}]

    async def people(query: str) -> list[dict]:
        """People."""
        await asyncio.wait_for(barrier.wait(), 60)
        return [{"title": query, "text": "a person"}]

    two = AIMessage("", tool_calls=[
        {"name": "films", "args": {"query": "Inception"}, "id": "c1", "type": "tool_call"},
        {"name": "people", "args": {"query": "Nolan"}, "id": "c2", "type": "tool_call"},
    ])  # fmt: skip
    return create_parallel_search_agent(ScriptModel(replies=[two, "done"]), [films, people])


def test_the_calls_of_one_round_run_in_parallel_across_named_searchers():
    import asyncio

    agent = waiting_pair_agent()
    out = asyncio.run(agent.ainvoke({"messages": [("user", "Who?")]}))
    assert out["errors"] == 0 and out["subqueries"] == 2


def test_review_keyed_by_a_searchers_name_pauses_as_in_create_agent():
    from langchain.agents.middleware import HumanInTheLoopMiddleware
    from langgraph.types import Command

    two = wiki_and_web_calls()
    paused = []
    for agent, _ in both(
        [two, "Nolan"],
        [wiki, web],
        middleware=[HumanInTheLoopMiddleware(interrupt_on={"wiki": True})],
        checkpointer=InMemorySaver(),
    ):
        thread = {"configurable": {"thread_id": "t"}}
        out = agent.invoke({"messages": [("user", "Who?")]}, thread)
        requests = out["__interrupt__"][0].value["action_requests"]
        paused.append([(r["name"], r["args"]) for r in requests])
        done = agent.invoke(Command(resume={"decisions": [{"type": "approve"}]}), thread)
        assert done["messages"][-1].content == "Nolan" and unanswered(done["messages"]) == []
        searched = [m.content for m in done["messages"] if isinstance(m, ToolMessage)]
        assert "the wiki on Inception" in searched[0] and "the web on Nolan news" in searched[1]
    assert paused[0] == paused[1] == [("wiki", {"query": "Inception"})]


def test_one_unnamed_searcher_or_a_lone_function_keeps_the_search_tool():
    for given in (Films(), wiki):
        model = ScriptModel(replies=[calls("x"), "y"])
        out = create_parallel_search_agent(model, given).invoke({"messages": [("user", "q?")]})
        assert model.tools[0] == ["search"] and out["answer"] == "y"
        assert [m.name for m in out["messages"] if isinstance(m, ToolMessage)] == ["search"]


@needs_data
def test_named_searchers_over_one_store_share_its_encoder_call(hotpot_store, monkeypatch):
    import asyncio

    from store_probes import counting_batches

    async def people(query: str, k: int) -> list:
        """People of the HotpotQA sample."""
        return await hotpot_store.asearch(query, k)

    async def films(query: str, k: int) -> list:
        """Films of the HotpotQA sample."""
        return await hotpot_store.asearch(query, k)

    batches = counting_batches(hotpot_store, monkeypatch)
    two = AIMessage("", tool_calls=[
        {"name": "people", "args": {"query": "Scott Derrickson"}, "id": "c1", "type": "tool_call"},
        {"name": "films", "args": {"query": "Ed Wood"}, "id": "c2", "type": "tool_call"},
    ])  # fmt: skip
    agent = create_parallel_search_agent(ScriptModel(replies=[two, "yes"]), [people, films], top_k=1)
    out = asyncio.run(agent.ainvoke({"messages": [("user", "Same nationality?")]}))
    assert out["subqueries"] == 2 and out["errors"] == 0
    assert batches == [["Scott Derrickson", "Ed Wood"]]  # one encoder call for the round


def test_wrap_model_call_sees_the_tools_as_langchain_tools_as_in_create_agent():
    from langchain.agents.middleware import wrap_model_call

    seen: list[list[tuple[str, str]]] = []

    @wrap_model_call
    def look(request, handler):
        seen.append([(t.name, type(t).__name__) for t in request.tools])
        return handler(request)

    for named in ([wiki, web], Films()):
        seen.clear()
        model = ScriptModel(replies=["y"])
        create_parallel_search_agent(model, named, middleware=[look]).invoke({"messages": [("user", "q?")]})
        names = ["wiki", "web"] if isinstance(named, list) else ["search"]
        assert seen == [[(n, "StructuredTool") for n in names]] and model.tools == [names]
    (ours, _), (theirs, _) = both(["y"], [wiki, web], middleware=[look])
    seen.clear()
    ours.invoke({"messages": [("user", "q?")]})
    theirs.invoke({"messages": [("user", "q?")]})
    assert seen[0] == seen[1]


def test_the_final_answer_is_one_update_as_in_create_agent():
    (ours, _), (theirs, _) = both([calls("a"), "done"], [wiki])

    def answers(agent) -> list[str]:
        parts = agent.stream({"messages": [("user", "q?")]}, stream_mode="updates")
        return [
            m.id
            for part in parts
            for update in part.values()
            for m in (update or {}).get("messages", [])
            if isinstance(m, AIMessage) and not m.tool_calls
        ]

    ours_ids, theirs_ids = answers(ours), answers(theirs)
    assert len(ours_ids) == len(theirs_ids) == 1
    out = ours.invoke({"messages": [("user", "q?")]})
    assert out["messages"][-1].response_metadata["status"] == "answered" and out["messages"][-1].name


def tool_events(agent, inputs: dict) -> list[tuple]:
    """``astream_events(v2)``'s tool events: (event, tool name, input, tool message name and call id)."""
    import asyncio

    async def collect() -> list[dict]:
        return [
            e async for e in agent.astream_events(inputs, version="v2") if e["event"].startswith("on_tool_")
        ]

    out = []
    for e in asyncio.run(collect()):
        msg = e["data"].get("output")
        out.append(
            (
                e["event"],
                e["name"],
                e["data"]["input"],
                getattr(msg, "name", None),
                getattr(msg, "tool_call_id", None),
            )
        )
    return out


def test_each_search_call_is_a_tool_run_in_astream_events_as_in_create_agent():
    two = wiki_and_web_calls()
    (ours, _), (theirs, _) = both([two, "Nolan"], [wiki, web])
    asked = {"messages": [("user", "Who?")]}
    mine, ref = tool_events(ours, asked), tool_events(theirs, asked)
    assert len(ref) == 4 and sorted(mine, key=str) == sorted(ref, key=str)
    assert ("on_tool_start", "wiki", {"query": "Inception"}, None, None) in mine
    # the event's tool message is the one the conversation keeps
    import asyncio

    async def ends_and_kept() -> tuple[list, list]:
        agent = create_parallel_search_agent(ScriptModel(replies=[two, "Nolan"]), [wiki, web])
        ends, out = [], None
        async for e in agent.astream_events(asked, version="v2"):
            if e["event"] == "on_tool_end":
                ends.append(e["data"]["output"])
            elif e["event"] == "on_chain_end" and e["name"] == agent.name:
                out = e["data"]["output"]
        return ends, [m for m in out["messages"] if isinstance(m, ToolMessage)]

    ends, kept = asyncio.run(ends_and_kept())
    assert len(kept) == 2
    assert sorted((m.tool_call_id, m.content) for m in ends) == [(m.tool_call_id, m.content) for m in kept]
    # a call repeated in one message is searched once, and each call is still one tool run
    (ours, _), (theirs, _) = both([calls("Inception", "Inception", tool="wiki"), "Nolan"], [wiki])
    mine, ref = tool_events(ours, asked), tool_events(theirs, asked)
    assert len(ref) == 4 and sorted(mine, key=str) == sorted(ref, key=str)


def test_tool_events_keep_the_round_parallel_and_name_the_search_tool_under_tags():

    agent = waiting_pair_agent()
    events = tool_events(agent, {"messages": [("user", "Who?")]})
    assert [e[0] for e in events] == ["on_tool_start", "on_tool_start", "on_tool_end", "on_tool_end"]
    tags = ScriptModel(replies=["<search> a ## b </search>", "<answer> y </answer>"])
    events = tool_events(create_parallel_search_agent(tags, Films(), protocol="tags"), {"question": "q?"})
    assert sorted((e[1:3] for e in events if e[0] == "on_tool_start"), key=str) == [
        ("search", {"query": "a"}), ("search", {"query": "b"})
    ]  # fmt: skip


@dataclass
class UserContext:
    user_id: str
    style: str = "short"


def test_a_dataclass_context_schema_reaches_middleware_as_in_create_agent():
    from langchain.agents.middleware import dynamic_prompt

    @dynamic_prompt
    def for_user(request) -> str:
        ctx = request.runtime.context
        return f"You help {ctx.user_id}; answer {ctx.style}."

    kw = {"middleware": [for_user], "context_schema": UserContext}
    (ours, our_model), (theirs, their_model) = both(["y"], [wiki], {"middleware_prompt": "as_given"}, **kw)
    ours.invoke({"messages": [("user", "q?")]}, context=UserContext(user_id="ada"))
    theirs.invoke({"messages": [("user", "q?")]}, context=UserContext(user_id="ada"))
    assert our_model.seen[0][0].content == their_model.seen[0][0].content == "You help ada; answer short."
    # a dict context becomes the dataclass, per-request knobs beside its fields
    model = ScriptModel(replies=[calls("a"), "y"])
    films = Films()
    agent = create_parallel_search_agent(model, films, context_schema=UserContext, top_k=3)
    out = agent.invoke({"messages": [("user", "q?")]}, context={"user_id": "bo", "top_k": 1})
    assert out["answer"] == "y" and films.queries == ["a"]
    import pytest

    with pytest.raises(TypeError, match="context_schema must be a TypedDict or a dataclass"):
        create_parallel_search_agent(model, films, context_schema=int)


def test_dynamic_prompt_keeps_the_protocols_search_instructions_unless_as_given():
    from langchain.agents.middleware import dynamic_prompt

    @dynamic_prompt
    def terse(request) -> str:
        return "Be terse."

    plain = ScriptModel(replies=["y"])
    create_parallel_search_agent(plain, Films()).invoke({"messages": [("user", "q?")]})
    instructions = plain.seen[0][0].content
    kept = ScriptModel(replies=["y"])
    create_parallel_search_agent(kept, Films(), middleware=[terse]).invoke({"messages": [("user", "q?")]})
    assert kept.seen[0][0].content == f"Be terse.\n\n{instructions}"
    (ours, our_model), (theirs, their_model) = both(
        ["y"], [wiki], {"middleware_prompt": "as_given"}, middleware=[terse]
    )
    ours.invoke({"messages": [("user", "q?")]})
    theirs.invoke({"messages": [("user", "q?")]})
    assert our_model.seen[0][0].content == their_model.seen[0][0].content == "Be terse."


class Film(BaseModel):
    """A film and the year it came out."""

    title: str
    year: int


def film_call(turn: int, year: object = 2010) -> AIMessage:
    args = {"title": "Inception", "year": year}
    return AIMessage(
        "", tool_calls=[{"name": "Film", "args": args, "id": f"out_{turn}", "type": "tool_call"}]
    )


def transcript(messages: Sequence[BaseMessage]) -> list[tuple]:
    """The record's shape: each message's type, name, tool calls' names and ids (search texts differ)."""
    return [
        (
            m.type,
            getattr(m, "tool_call_id", None),
            [(c["name"], c["id"]) for c in getattr(m, "tool_calls", [])],
        )
        for m in messages
    ]


def test_response_format_tool_strategy_answers_through_its_tool_as_in_create_agent():
    from langchain.agents.structured_output import ToolStrategy

    replies = [calls("Inception", tool="wiki"), film_call(1)]
    for given in (ToolStrategy(Film), Film):  # a bare schema: this stand-in has no provider support
        (ours, our_model), (theirs, their_model) = both(replies, [wiki], response_format=given)
        out = ours.invoke({"messages": [("user", "Which film?")]})
        ref = theirs.invoke({"messages": [("user", "Which film?")]})
        assert out["structured_response"] == ref["structured_response"] == Film(title="Inception", year=2010)
        assert transcript(out["messages"]) == transcript(ref["messages"])
        assert out["messages"][-1].content == ref["messages"][-1].content
        assert our_model.tools == their_model.tools == [["wiki", "Film"]] * 2
        assert [k.get("tool_choice") for k in our_model._kwargs] == [
            k.get("tool_choice") for k in their_model._kwargs
        ]
        assert out["answer"] == '{"title": "Inception", "year": 2010}' and out["search_rounds"] == 1
        assert unanswered(out["messages"]) == []


def test_a_refused_structured_answer_is_retried_as_in_create_agent():
    from langchain.agents.structured_output import ToolStrategy

    replies = [film_call(0, year="not a year"), film_call(1)]
    (ours, _), (theirs, _) = both(replies, [wiki], response_format=ToolStrategy(Film))
    out = ours.invoke({"messages": [("user", "Which film?")]})
    ref = theirs.invoke({"messages": [("user", "Which film?")]})
    assert out["structured_response"] == ref["structured_response"] == Film(title="Inception", year=2010)
    assert transcript(out["messages"]) == transcript(ref["messages"])
    errors = [m.content for m in out["messages"] if isinstance(m, ToolMessage)][:1]
    assert errors == [m.content for m in ref["messages"] if isinstance(m, ToolMessage)][:1]
    import pytest
    from langchain.agents.structured_output import StructuredOutputValidationError

    for agent, _ in both(replies, [wiki], response_format=ToolStrategy(Film, handle_errors=False)):
        with pytest.raises(StructuredOutputValidationError):
            agent.invoke({"messages": [("user", "Which film?")]})


def test_response_format_provider_strategy_parses_the_answer_as_in_create_agent():
    from langchain.agents.structured_output import ProviderStrategy

    replies = [calls("Inception", tool="wiki"), '{"title": "Inception", "year": 2010}']
    for given, model_kw in ((ProviderStrategy(Film), {}), (Film, {"profile": {"structured_output": True}})):
        ours_model, theirs_model = (
            ScriptModel(replies=replies, **model_kw),
            ScriptModel(replies=replies, **model_kw),
        )
        from langchain.agents import create_agent

        out = create_parallel_search_agent(ours_model, [wiki], response_format=given).invoke(
            {"messages": [("user", "q?")]}
        )
        ref = create_agent(theirs_model, [wiki], response_format=given).invoke({"messages": [("user", "q?")]})
        assert out["structured_response"] == ref["structured_response"] == Film(title="Inception", year=2010)
        assert transcript(out["messages"]) == transcript(ref["messages"])
        assert ours_model.tools == theirs_model.tools == [["wiki"]] * 2
        sent = [k.get("response_format") for k in ours_model._kwargs]
        assert sent == [k.get("response_format") for k in theirs_model._kwargs] and sent[0] is not None


def test_a_structured_answer_belongs_to_its_turn_of_the_thread():
    from langchain.agents.structured_output import ToolStrategy

    model = ScriptModel(replies=[calls("Inception", tool="wiki"), film_call(1), "no schema this time"])
    agent = create_parallel_search_agent(
        model, [wiki], response_format=ToolStrategy(Film), checkpointer=InMemorySaver()
    )
    thread = {"configurable": {"thread_id": "t"}}
    first = agent.invoke({"messages": [("user", "Which film?")]}, thread)
    second = agent.invoke({"messages": [("user", "And again?")]}, thread)
    assert first["structured_response"] == Film(title="Inception", year=2010)
    assert second.get("structured_response") is None and second["answer"] == "no schema this time"
    assert (
        unanswered(model.seen[-1]) == []
    )  # the output call and its tool message are history a provider takes


def test_interrupt_on_naming_no_tool_warns_once_with_the_tools_names():
    import warnings

    import pytest
    from langchain.agents.middleware import HumanInTheLoopMiddleware

    def build(searchers, names: dict):
        review = HumanInTheLoopMiddleware(interrupt_on=names)
        return create_parallel_search_agent(ScriptModel(replies=["y"]), searchers, middleware=[review])

    with pytest.warns(
        UserWarning, match="interrupt_on names no tool of this agent: 'wiki'; its tools are 'search'"
    ) as seen:
        build(wiki, {"wiki": True})
    assert len([w for w in seen if "interrupt_on" in str(w.message)]) == 1
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        build(wiki, {"search": True})  # the README's shape
        build([wiki, web], {"wiki": True})  # named tools: each reviewed under its own name


def lookup(query: str) -> str:
    """Look a query up: one line of text."""
    return f"{query}: a 2010 film by Christopher Nolan."


def test_a_tool_returning_text_is_read_as_its_text_as_in_create_agent():
    from langchain_core.tools import tool

    as_tool = tool(lookup)
    for given in ([lookup], [as_tool]):
        (ours, _), (theirs, _) = both([calls("Inception", tool="lookup"), "Nolan"], given)
        out = ours.invoke({"messages": [("user", "Who?")]})
        ref = theirs.invoke({"messages": [("user", "Who?")]})
        mine = [(m.name, m.content, m.status) for m in out["messages"] if isinstance(m, ToolMessage)]
        assert mine == [(m.name, m.content, m.status) for m in ref["messages"] if isinstance(m, ToolMessage)]
        assert mine[0][1] == "Inception: a 2010 film by Christopher Nolan." and out["errors"] == 0
    # a lone function is the one search tool: the model reads its text all the same
    model = ScriptModel(replies=[calls("Inception"), "Nolan"])
    out = create_parallel_search_agent(model, lookup).invoke({"messages": [("user", "Who?")]})
    assert [m.content for m in out["messages"] if isinstance(m, ToolMessage)] == [lookup("Inception")]
    assert out["errors"] == 0 and out["messages"][-1].response_metadata["status"] == "answered"


def test_a_content_and_artifact_tool_keeps_its_artifact_as_in_create_agent():
    from langchain_core.documents import Document
    from langchain_core.tools import tool

    @tool(response_format="content_and_artifact")
    def sources(query: str) -> tuple:
        """Search the sources; the documents come back as the artifact."""
        docs = [Document(f"{query} came out in 2010.", metadata={"title": query, "url": "https://x/1"})]
        return f"1 source found for {query}.", docs

    (ours, _), (theirs, _) = both([calls("Inception", tool="sources"), "Nolan"], [sources])
    out = ours.invoke({"messages": [("user", "When?")]})
    ref = theirs.invoke({"messages": [("user", "When?")]})
    mine = [m for m in out["messages"] if isinstance(m, ToolMessage)]
    want = [m for m in ref["messages"] if isinstance(m, ToolMessage)]
    assert [m.content for m in mine] == [m.content for m in want] == ["1 source found for Inception."]
    assert mine[0].artifact == want[0].artifact and mine[0].artifact[0].metadata["url"] == "https://x/1"
    obs = [t for t in out["trajectory"] if t["type"] == "observation"][0]
    assert [p["title"] for p in obs["results"][0]["passages"]] == ["Inception"]  # the record: the artifact's


def test_a_searcher_the_graph_cannot_take_is_refused_at_build_naming_it():
    import pytest

    def count(query: str) -> int:
        """How many pages mention it."""
        return 3

    with pytest.raises(TypeError, match="searcher function 'count' returns int"):
        create_parallel_search_agent(ScriptModel(replies=["y"]), [count])


@needs_data
def test_sync_named_searchers_over_one_store_share_its_encoder_call(hotpot_store, monkeypatch):
    import asyncio

    from store_probes import counting_batches

    def people(query: str, k: int) -> list:
        """People of the HotpotQA sample."""
        return hotpot_store.search(query, k)

    def films(query: str, k: int) -> list:
        """Films of the HotpotQA sample."""
        return hotpot_store.search(query, k)

    batches = counting_batches(hotpot_store, monkeypatch)
    two = AIMessage("", tool_calls=[
        {"name": "people", "args": {"query": "Scott Derrickson"}, "id": "c1", "type": "tool_call"},
        {"name": "films", "args": {"query": "Ed Wood"}, "id": "c2", "type": "tool_call"},
    ])  # fmt: skip
    for run in ("invoke", "ainvoke"):
        batches.clear()
        agent = create_parallel_search_agent(ScriptModel(replies=[two, "yes"]), [people, films], top_k=1)
        asked = {"messages": [("user", "Same nationality?")]}
        out = agent.invoke(asked) if run == "invoke" else asyncio.run(agent.ainvoke(asked))
        assert out["subqueries"] == 2 and out["errors"] == 0
        assert [sorted(b) for b in batches] == [["Ed Wood", "Scott Derrickson"]], run  # one encoder call
