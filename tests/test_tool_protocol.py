"""The tools protocol: a chat model's parallel ``search`` tool calls are the sub-queries of one
round, with the tags protocol's fan-out, coalescing and counts; tool-call parsing never raises."""

from __future__ import annotations

import asyncio

import pytest
from conftest import UvicornThread, needs_data
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from store_probes import counting_batches

from parallelsearch.agents.protocol import parse_action, parse_tool_calls, tool_feedback


def call(query, cid="c", name="search"):
    return {"name": name, "args": {"query": query}, "id": cid, "type": "tool_call"}


def test_parallel_calls_are_one_search_like_hash_separated_text():
    act = parse_tool_calls([call(" a  b ", "1"), call("c", "2"), call("a b", "3")], "thinking")
    tags = parse_action("<think>thinking</think><search> a  b ## c ## a b </search>")
    assert act.kind == tags.kind == "search"
    assert act.subqueries == tags.subqueries == ("a b", "c") and act.dropped == tags.dropped == ("a b",)
    assert act.think == "thinking" and [(c.id, c.index) for c in act.calls] == [("1", 0), ("2", 1), ("3", 0)]


def test_no_call_is_the_answer_and_an_empty_reply_is_invalid():
    assert parse_tool_calls([], " Paris ").answer == "Paris"
    assert parse_tool_calls(None, [{"type": "text", "text": "Rome"}]).answer == "Rome"
    empty = parse_tool_calls([], "  ")
    assert empty.kind == "invalid" and empty.reason == "no tool call and no answer text"


@pytest.mark.parametrize(
    ("calls", "broken", "reason"),
    [
        ([call("a", name="lookup")], [], "unknown tool 'lookup'"),
        ([{"name": "search", "args": {"q": "a"}, "id": "x"}], [], "bad arguments"),
        ([{"name": "search", "args": "a", "id": "x"}], [], "bad arguments"),
        ([call("   ")], [], "empty query"),
        ([], [{"name": "search", "args": "{oops", "id": "x", "error": "Expecting value"}], "not valid JSON"),
        ([call(str(i), str(i)) for i in range(9)], [], "10 search calls in one message"),
    ],
)
def test_invalid_calls_make_the_turn_invalid_and_every_call_gets_feedback(calls, broken, reason):
    act = parse_tool_calls([*calls, call("fine", "ok")], "", broken, max_subqueries=8)
    assert act.kind == "invalid" and reason in act.reason
    notes = dict(tool_feedback(act))
    assert set(notes) == {c.id for c in act.calls} and "ok" in notes
    assert notes["ok"].startswith("Not searched: this message is invalid")


def test_one_query_per_turn_when_splitting_is_off():
    assert parse_tool_calls([call("a", "1")], split=False).kind == "search"
    act = parse_tool_calls([call("a", "1"), call("b", "2")], split=False)
    assert act.kind == "invalid" and "one query per turn" in act.reason


@pytest.mark.parametrize(
    "junk", [5, "calls", [None], [{"name": None}], [{"name": "search", "args": {"query": 3}}], object()]
)
def test_the_tool_call_parser_never_raises(junk):
    act = parse_tool_calls(junk, object(), junk)
    assert act.kind in ("invalid", "answer", "search")


# ---- planners: a chat model is never taken for a policy -------------------------------------


def test_a_chat_model_is_wrapped_and_anything_else_is_refused_by_name():
    from langchain_core.language_models.fake_chat_models import FakeListChatModel

    from parallelsearch.agents.policies import ChatModelPolicy, OraclePolicy, ScriptedToolChatModel, as_policy
    from parallelsearch.agents.policies.coerce import resolve_protocol

    plain = as_policy(FakeListChatModel(responses=["<answer> x </answer>"]))
    assert (
        isinstance(plain, ChatModelPolicy) and resolve_protocol("auto", plain).name == "tags"
    )  # no bind_tools
    assert resolve_protocol("auto", as_policy(ScriptedToolChatModel(turns=["x"]))).name == "tools"
    assert isinstance(as_policy("oracle"), OraclePolicy)
    with pytest.raises(TypeError, match=r"cannot use int '42' as the planner; pass a LangChain chat model"):
        as_policy(42)
    with pytest.raises(ValueError, match="protocol 'tools' needs a LangChain chat model with bind_tools"):
        resolve_protocol("tools", as_policy("oracle"))
    with pytest.raises(ValueError, match="protocol 'tools' needs a LangChain chat model with bind_tools"):
        resolve_protocol("tools", as_policy(FakeListChatModel(responses=["x"])))


class ToySearcher:
    """A searcher of one made-up passage per query (the graph logic, not retrieval, is tested)."""

    name = "toy"

    def __init__(self):
        self.queries: list[str] = []

    async def asearch(self, query, k=3):
        from parallelsearch.stores import Passage

        self.queries.append(query)
        return [Passage(query, query.title(), f"about {query}", 1.0, self.name)]


def test_a_fake_chat_model_runs_as_a_tags_planner_through_the_builder():
    """The failure of the issue: a LangChain chat model given straight to the builder."""
    from langchain_core.language_models.fake_chat_models import FakeListChatModel

    from parallelsearch.graphs import build_parallel_search_graph

    model = FakeListChatModel(responses=["<search> a ## b </search>", "<answer> x </answer>"])
    out = build_parallel_search_graph(model, ToySearcher()).invoke({"question": "q?"})
    assert (out["answer"], out["protocol"], out["subqueries"], out["policy"]) == (
        "x",
        "tags",
        2,
        "chat:FakeListChatModel",
    )


def test_invalid_calls_cost_a_turn_and_are_answered_by_tool_messages():
    from parallelsearch import ScriptedToolChatModel, create_parallel_search_agent

    bad = AIMessage(
        content="",
        tool_calls=[call("a", "c1", name="lookup"), call("b", "c2")],
    )
    model = ScriptedToolChatModel(turns=[bad, ["b"], "x"])
    searcher = ToySearcher()
    graph = create_parallel_search_agent(model, searcher)
    out = graph.invoke({"question": "q?"})
    assert (out["answer"], out["policy_calls"], out["search_rounds"], searcher.queries) == ("x", 3, 1, ["b"])
    assert (
        out["trajectory"][0]["action"] == "invalid"
        and "unknown tool 'lookup'" in out["trajectory"][0]["reason"]
    )
    states = list(graph.stream({"question": "q?"}, stream_mode="values"))
    msgs = states[-1]["messages"]
    tools = [m for m in msgs if isinstance(m, ToolMessage)]
    assert [m.tool_call_id for m in tools] == ["c1", "c2", "call_1_0"]
    assert "unknown tool 'lookup'" in tools[0].content and tools[1].content.startswith("Not searched")
    assert tools[2].content.startswith("Doc 1(Title: B) about b")


@pytest.mark.parametrize("meta", [{"finish_reason": "length"}, {"stop_reason": "max_tokens"}])
def test_a_reply_cut_at_the_token_limit_is_not_taken_as_the_answer(meta):
    """Half a call (or half an answer) that stopped at the token limit costs a turn and is told so;
    the episode goes on to a real answer. A complete reply without calls still answers."""
    from parallelsearch import ScriptedToolChatModel, create_parallel_search_agent
    from parallelsearch.agents.protocol import CUT_REPLY_REASON

    cut = AIMessage(content='<tool_call>\n{"name": "search", "argu', response_metadata=meta)
    model = ScriptedToolChatModel(turns=[cut, ["b"], "x"])
    graph = create_parallel_search_agent(model, ToySearcher())
    out = graph.invoke({"question": "q?"})
    first = out["trajectory"][0]
    assert (first["action"], first["reason"], first["finish_reason"]) == (
        "invalid",
        CUT_REPLY_REASON,
        "length",
    )
    assert (out["answer"], out["policy_calls"], out["search_rounds"]) == ("x", 3, 1)
    states = list(graph.stream({"question": "q?"}, stream_mode="values"))
    assert [m.content for m in states[-1]["messages"] if isinstance(m, HumanMessage)] == ["q?"]
    (after, note), *_ = states[-1]["notes"]  # told to the model, kept out of the conversation
    assert note.content.startswith("Your reply was cut at the token limit")
    assert after == next(m.id for m in states[-1]["messages"] if isinstance(m, AIMessage))
    assert parse_tool_calls([], "x", cut=False).kind == "answer"
    assert parse_tool_calls([call("a", "c1")], "", cut=True).kind == "search"  # complete calls still run


def test_messages_in_and_out_and_a_messages_state_parent():
    from langgraph.graph import START, MessagesState, StateGraph

    from parallelsearch import ScriptedToolChatModel, create_parallel_search_agent

    agent = create_parallel_search_agent(
        ScriptedToolChatModel(turns=[["a", "b"], "x"]), ToySearcher(), name="researcher"
    )
    out = agent.invoke({"messages": [HumanMessage("Who are a and b?")]})
    # the conversation is the record: the question, the calls, one tool message per call, the answer
    assert [m.type for m in out["messages"]] == ["human", "ai", "tool", "tool", "ai"]
    assert out["messages"][-1].content == "x" and out["messages"][-1].name == "researcher"
    assert out["subqueries"] == 2 and agent.name == "researcher"

    parent = StateGraph(MessagesState)
    parent.add_node("research", agent)
    parent.add_edge(START, "research")
    app = parent.compile()
    res = app.invoke({"messages": [("user", "Who are a and b?")]})
    assert [m.type for m in res["messages"]] == ["human", "ai", "tool", "tool", "ai"]
    assert res["messages"][-1].content == "x"
    res2 = asyncio.run(app.ainvoke({"messages": [*res["messages"], ("user", "And c?")]}))
    assert [m.type for m in res2["messages"]][5:] == ["human", "ai", "tool", "tool", "ai"]


def test_no_question_is_one_clear_error():
    from parallelsearch import ScriptedToolChatModel, create_parallel_search_agent

    agent = create_parallel_search_agent(ScriptedToolChatModel(turns=["x"]), ToySearcher())
    with pytest.raises(ValueError, match="'messages' holding a human message"):
        agent.invoke({"messages": [AIMessage("hello")]})


def test_sync_invoke_stream_and_batch_match_ainvoke():
    from parallelsearch import ScriptedToolChatModel, create_parallel_search_agent

    agent = create_parallel_search_agent(ScriptedToolChatModel(turns=[["a", "b"], "x"]), ToySearcher())
    want = asyncio.run(agent.ainvoke({"question": "q?"}))
    got = agent.invoke({"question": "q?"})
    keys = ("answer", "policy_calls", "search_rounds", "subqueries", "passages")
    assert [got[k] for k in keys] == [want[k] for k in keys] == ["x", 2, 1, 2, 2]
    nodes = [next(iter(chunk)) for chunk in agent.stream({"question": "q?"}, stream_mode="updates")]
    assert nodes == ["model", "tools", "model"]
    batch = agent.batch([{"question": "q1?"}, {"question": "q2?"}])
    assert [b["answer"] for b in batch] == ["x", "x"]


# ---- real parts: a Chroma store, ChatOpenAI against a local OpenAI-compatible server ----------

Q = "Were Scott Derrickson and Ed Wood of the same nationality?"


@needs_data
def test_tool_calls_and_tags_take_the_same_rounds_calls_and_encoder_batches(hotpot_store, monkeypatch):
    from parallelsearch import ScriptedToolChatModel, create_parallel_search_agent
    from parallelsearch.agents.policies import ScriptedPolicy
    from parallelsearch.graphs import build_parallel_search_graph

    subs = ["Scott Derrickson nationality", "Ed Wood nationality"]
    batches = counting_batches(hotpot_store, monkeypatch)
    tags = build_parallel_search_graph(
        ScriptedPolicy([f"<search> {' ## '.join(subs)} </search>", "<answer> yes </answer>"]), hotpot_store
    )
    tools = create_parallel_search_agent(ScriptedToolChatModel(turns=[subs, "yes"]), hotpot_store)
    a = asyncio.run(tags.ainvoke({"question": Q}))
    tag_batches = list(batches)
    b = asyncio.run(tools.ainvoke({"question": Q}))
    keys = ("answer", "policy_calls", "search_rounds", "subqueries", "passages", "errors")
    assert [a[k] for k in keys] == [b[k] for k in keys] == ["yes", 2, 1, 2, 6, 0]
    assert (a["protocol"], b["protocol"]) == ("tags", "tools")
    assert tag_batches == [subs] and batches[len(tag_batches) :] == [subs]  # one encoder call per round
    obs = [t for t in b["trajectory"] if t["type"] == "observation"][0]
    assert [r["query"] for r in obs["results"]] == subs and all(
        len(r["passages"]) == 3 for r in obs["results"]
    )
    # the sync path meets on one loop too: still one encoder call for the round
    before = len(batches)
    assert tools.invoke({"question": Q})["subqueries"] == 2 and batches[before:] == [subs]


@needs_data
def test_chat_openai_with_parallel_tool_calls_from_a_local_server(hotpot_store, monkeypatch):
    pytest.importorskip("langchain_openai", reason="langchain-openai is in the dev extra")
    from langchain_openai import ChatOpenAI
    from servers import make_openai_chat_test_server

    from parallelsearch import create_parallel_search_agent

    batches = counting_batches(hotpot_store, monkeypatch)
    app = make_openai_chat_test_server([["Scott Derrickson", "Ed Wood"], "yes"])
    with UvicornThread(app) as srv:
        model = ChatOpenAI(
            model="test-model", base_url=srv.url + "/v1", api_key="sk-test", timeout=10, max_retries=0
        )
        agent = create_parallel_search_agent(model, hotpot_store, top_k=2)
        out = agent.invoke({"messages": [("user", Q)]})
        out2 = asyncio.run(agent.ainvoke({"question": Q}))
        out3 = agent.invoke({"question": Q})  # sync, async, sync: no loop-bound connection is shared
    assert out["protocol"] == "tools" and out["messages"][-1].content == "yes"
    for o in (out, out2, out3):
        assert (o["policy_calls"], o["search_rounds"], o["subqueries"], o["passages"]) == (2, 1, 2, 4)
    assert batches == [["Scott Derrickson", "Ed Wood"]] * 3
    first, second = app.state.requests[:2]
    assert [t["function"]["name"] for t in first["tools"]] == ["search"]
    replies = [m for m in second["messages"] if m["role"] == "tool"]
    assert [m["tool_call_id"] for m in replies] == ["call_0_0", "call_0_1"]
    assert all(m["content"].startswith("Doc 1(Title: ") for m in replies)
    assert second["messages"][2]["tool_calls"][1]["function"]["arguments"] == '{"query": "Ed Wood"}'


def test_chat_openai_arguments_that_are_not_an_object_cost_a_turn_not_the_episode():
    """What vLLM's hermes parser sends for a tool without ``strict`` under ``tool_choice="required"``
    (docs/vllm.md): ``true`` makes LangChain's AIMessage refuse the reply; ``null`` reaches the
    graph as ``{}``. Both are answered with the corrective note and the next turn goes on."""
    pytest.importorskip("langchain_openai", reason="langchain-openai is in the dev extra")
    from langchain_openai import ChatOpenAI
    from servers import make_openai_chat_test_server

    from parallelsearch import create_parallel_search_agent

    searcher = ToySearcher()
    script = [[{"arguments": "true"}, {"arguments": "true"}], [{"arguments": "null"}], ["b"], "x"]
    app = make_openai_chat_test_server(script)
    with UvicornThread(app) as srv:
        model = ChatOpenAI(model="m", base_url=srv.url + "/v1", api_key="sk-test", timeout=10, max_retries=0)
        out = create_parallel_search_agent(model, searcher, max_turns=4).invoke({"question": "q?"})
    assert (out["answer"], out["policy_calls"], out["search_rounds"], searcher.queries) == ("x", 4, 1, ["b"])
    turns = [t for t in out["trajectory"] if t["type"] == "turn"]
    assert [t["action"] for t in turns] == ["invalid", "invalid", "search", "answer"]
    assert "true is not an object" in turns[0]["reason"] and "bad arguments {}" in turns[1]["reason"]
    second, third = app.state.requests[1:3]
    # the refused calls go back to the server as the calls they were, each answered by its note
    assert second["messages"][0]["role"] == "system" and second["messages"][1]["content"] == "q?"
    assert [c["function"]["arguments"] for c in second["messages"][2]["tool_calls"]] == ["true", "true"]
    notes = [m for m in third["messages"] if m["role"] == "tool"]
    assert [m["tool_call_id"] for m in notes] == ["call_0_0", "call_0_1", "call_1_0"]
    assert "true is not an object" in notes[0]["content"] and '{"query": string}' in notes[2]["content"]


def test_the_chat_page_newcomer_script_runs_verbatim_against_a_local_openai_server(monkeypatch, capsys):
    """docs/chat-agent.md's front-door script (at most 10 lines), unchanged: ChatOpenAI finds the local
    test server through OPENAI_BASE_URL, as it would find api.openai.com."""
    pytest.importorskip("langchain_openai", reason="langchain-openai is in the dev extra")
    import re

    from conftest import ROOT
    from servers import make_openai_chat_test_server

    page = (ROOT / "docs" / "chat-agent.md").read_text()
    section = page.split("## A chat model and your searcher", 1)[1]
    code = re.search(r"```python[^\n]*\n(.*?)```", section, re.S).group(1)
    lines = [line for line in code.splitlines() if line.strip()]
    assert len(lines) <= 10, code
    app = make_openai_chat_test_server([["Paris", "Rome"], "yes"])
    with UvicornThread(app) as srv:
        monkeypatch.setenv("OPENAI_BASE_URL", srv.url + "/v1")
        monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
        exec(compile(code, "docs/chat-agent.md", "exec"), {"__name__": "docs"})
    printed = capsys.readouterr().out.splitlines()
    assert printed[0] == "yes" and any("'search'" in line for line in printed[1:])
    assert len(app.state.requests) == 4 and all(
        r["tools"][0]["function"]["name"] == "search" for r in app.state.requests
    )


def test_a_planner_that_never_speaks_the_protocol_is_warned_about_once(caplog):
    """A plain-text chat model under the tags protocol: unanswered, but not silently."""
    from langchain_core.language_models.fake_chat_models import FakeListChatModel

    from parallelsearch import create_parallel_search_agent

    agent = create_parallel_search_agent(
        FakeListChatModel(responses=["Paris, I think."]), ToySearcher(), max_turns=1
    )
    with caplog.at_level("WARNING", logger="parallelsearch.graphs.engine"):
        outs = [agent.invoke({"question": "capital of France?"}) for _ in range(2)]
    assert [o["status"] for o in outs] == ["unanswered"] * 2 and outs[0]["protocol"] == "tags"
    assert outs[0]["messages"][-1].content.startswith("No answer")
    warned = [r.getMessage() for r in caplog.records if "planner turns was invalid" in r.getMessage()]
    assert len(warned) == 1 and "no <search> or <answer> tag" in warned[0] and "protocol='tools'" in warned[0]


def test_init_chat_model_strings_are_planners(monkeypatch):
    """``chat:PROVIDER:MODEL`` (and any ``provider:model`` that is not one of our spec kinds)
    goes to LangChain's init_chat_model; here ChatOpenAI reaches the local server."""
    pytest.importorskip("langchain", reason="langchain (init_chat_model) is in the dev extra")
    pytest.importorskip("langchain_openai", reason="langchain-openai is in the dev extra")
    from servers import make_openai_chat_test_server

    from parallelsearch import create_parallel_search_agent

    app = make_openai_chat_test_server([["a", "b"], "x"])
    with UvicornThread(app) as srv:
        monkeypatch.setenv("OPENAI_BASE_URL", srv.url + "/v1")
        monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
        agent = create_parallel_search_agent("chat:openai:test-model", ToySearcher())
        out = agent.invoke({"question": "a and b?"})
    assert (out["answer"], out["protocol"], out["policy"], out["subqueries"]) == (
        "x",
        "tools",
        "chat:openai:test-model",
        2,
    )
    assert app.state.requests[0]["model"] == "test-model"
    with pytest.raises(ImportError, match="langchain.mistralai|langchain_mistralai"):
        create_parallel_search_agent("mistralai:mistral-large-latest", ToySearcher())


@needs_data
def test_store_names_open_through_the_factory_and_named_searchers_are_routed(hotpot_store):
    from parallelsearch import RetrievalConfig, ScriptedToolChatModel, create_parallel_search_agent

    retrieval = RetrievalConfig(chroma_path=hotpot_store.location)
    model = ScriptedToolChatModel(turns=[["Scott Derrickson", "Ed Wood"], "yes"])
    by_name = create_parallel_search_agent(model, "hotpot", retrieval=retrieval, top_k=1)
    out = by_name.invoke({"question": Q})
    assert (out["subqueries"], out["passages"], out["answer"]) == (2, 2, "yes")
    titles = _passages(out, "title")
    assert titles == ["Scott Derrickson", "Ed Wood"]

    toy = ToySearcher()
    routed = create_parallel_search_agent(
        ScriptedToolChatModel(turns=[["toy: Ed Wood", "hotpot: Ed Wood"], "yes"]),
        [toy, hotpot_store],
        top_k=1,
    )
    out = routed.invoke({"question": Q})
    stores = _passages(out, "store")
    assert stores == ["toy", "hotpot"] and toy.queries == ["Ed Wood"]
    assert "Available knowledge stores: toy, hotpot" in out["transcript"]


def _passages(out: dict, key: str) -> list:
    """``key`` of every passage the run's observations hold, in order."""
    obs = [t for t in out["trajectory"] if t["type"] == "observation"]
    return [p[key] for t in obs for r in t["results"] for p in r["passages"]]


def test_a_thread_is_a_conversation_one_episode_per_new_human_message():
    from langgraph.checkpoint.memory import InMemorySaver

    from parallelsearch import ScriptedToolChatModel, create_parallel_search_agent

    agent = create_parallel_search_agent(
        ScriptedToolChatModel(turns=[["a"], "x"]), ToySearcher(), checkpointer=InMemorySaver()
    )
    cfg = {"configurable": {"thread_id": "t1"}}
    agent.invoke({"messages": [("user", "first?")]}, cfg)
    agent.invoke({"question": "second?"}, cfg)
    out = agent.invoke({"messages": [("user", "third?")]}, cfg)
    assert [m.type for m in out["messages"]] == ["human", "ai", "tool", "ai"] * 3
    assert [m.content for m in out["messages"] if m.type == "human"] == ["first?", "second?", "third?"]
    assert [m.content for m in out["messages"][3::4]] == ["x", "x", "x"]
    history = agent.get_state(cfg).values["history"]
    assert [h["question"] for h in history] == ["first?", "second?", "third?"]
    assert out["policy_calls"] == 2 and out["search_rounds"] == 1  # the episode's own counts


def test_the_environments_notes_are_hidden_from_chat_uis_and_apart_from_the_user():
    """A corrective or final-turn note is in the model's conversation but not a user bubble:
    Agent Chat UI skips ids starting ``do-not-render-``, and the name tells it from the user."""
    from parallelsearch.agents.protocol import get_protocol
    from parallelsearch.agents.protocol.turn import TurnResult

    tools = get_protocol("tools")
    reply = TurnResult(text="  ", tool_calls=[])
    retry = tools.feedback(reply, parse_tool_calls([], "  "))
    final = tools.final_note()
    notes = [*retry.messages, *final.messages]
    assert len(notes) == 2 and all(isinstance(m, HumanMessage) for m in notes)
    assert all(m.id.startswith("do-not-render-") and m.name == "parallelsearch" for m in notes)
    assert notes[0].id != tools.feedback(reply, parse_tool_calls([], "  ")).messages[0].id


def test_an_answer_in_the_text_form_s_tags_is_read_as_its_text_when_served():
    """A policy trained on ``tool_text`` answers in ``<answer>`` tags; served as a chat model
    (no tool call) its answer is the tags' text, and exact match scores it as in training."""
    from parallelsearch.data.metrics import exact_match

    action = parse_tool_calls([], "<answer> Beijing </answer>")
    assert action.kind == "answer" and action.answer == "Beijing"
    assert exact_match(action.answer, ["Beijing"]) == 1.0
    assert parse_tool_calls([], "Beijing").answer == "Beijing"
    assert parse_tool_calls([], "<answer>  </answer>").answer == "<answer>  </answer>"
