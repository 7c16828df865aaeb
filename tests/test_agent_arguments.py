"""What a model argument means, decided when the graph is built: a string is ``init_chat_model``'s
unless it is one of this project's spec forms (``openai:MODEL@URL``, ``vllm:``, ``hf:``,
``oracle``, ``scripted:``, ``chat:``, ``external``); an ambiguous one and a pre-bound chat model
are refused with the fix. Both readings of ``openai:`` then run against local stand-in servers
(the OpenAI chat API with tool calls, and a completions endpoint like ``vllm serve``) through
LangChain's real ``ChatOpenAI`` and our completions policy.
"""

from __future__ import annotations

import pytest
from conftest import UvicornThread
from servers import make_openai_chat_test_server, make_openai_test_server

from parallelsearch import create_parallel_search_agent
from parallelsearch.agents.policies import ChatModelPolicy, OpenAICompletionsPolicy, OraclePolicy, as_policy
from parallelsearch.graphs import build_parallel_search_graph
from parallelsearch.stores import Passage

pytest.importorskip("langchain", reason="langchain (init_chat_model) is in the dev extra")
pytest.importorskip("langchain_openai", reason="langchain-openai is in the dev extra")

Q = "Were Scott Derrickson and Ed Wood of the same nationality?"


async def wiki(query: str) -> list[Passage]:
    return [Passage(query, query, f"{query} is American.", 1.0, "wiki")]


@pytest.fixture
def openai_env(monkeypatch):
    """A key for ChatOpenAI's constructor; nothing is sent at build time (the base URL is a closed port)."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")


def test_openai_model_without_url_is_init_chat_models_chat_openai(openai_env):
    from langchain_openai import ChatOpenAI

    pol = as_policy("openai:gpt-4o-mini")
    assert isinstance(pol, ChatModelPolicy) and isinstance(pol.model, ChatOpenAI)
    from parallelsearch.agents.policies.coerce import resolve_protocol

    assert (pol.model.model_name, resolve_protocol("auto", pol).name, pol.name) == (
        "gpt-4o-mini",
        "tools",
        "chat:openai:gpt-4o-mini",
    )
    bare = as_policy("gpt-4o-mini")  # init_chat_model infers the provider
    assert isinstance(bare.model, ChatOpenAI) and bare.model.model_name == "gpt-4o-mini"


def test_our_spec_forms_stay_ours(openai_env, tmp_path):
    pol = as_policy("openai:ps-7b@http://127.0.0.1:9/v1")
    assert isinstance(pol, OpenAICompletionsPolicy) and (pol.model, pol.base_url) == (
        "ps-7b",
        "http://127.0.0.1:9/v1",
    )
    assert isinstance(as_policy("oracle"), OraclePolicy)
    chat = as_policy("chat:openai:gpt-4o-mini")
    assert isinstance(chat, ChatModelPolicy) and chat.model.model_name == "gpt-4o-mini"
    script = tmp_path / "turns.json"
    script.write_text('["<answer> x </answer>"]')
    assert type(as_policy(f"scripted:{script}")).__name__ == "ScriptedPolicy"
    # a configured base URL makes openai:MODEL the completions endpoint (the CLI's settings path)
    assert isinstance(as_policy("openai:ps-7b", base_url="http://127.0.0.1:9/v1"), OpenAICompletionsPolicy)


def test_an_ambiguous_string_is_refused_at_build_time_with_both_readings(openai_env):
    with pytest.raises(ValueError) as err:
        create_parallel_search_agent("openai:Qwen/Qwen2.5-7B-Instruct", wiki)
    msg = str(err.value)
    assert "reads two ways" in msg
    assert "'openai:Qwen/Qwen2.5-7B-Instruct@http://127.0.0.1:8000/v1'" in msg  # reading 1: our spec
    assert "'chat:openai:Qwen/Qwen2.5-7B-Instruct'" in msg and "ChatOpenAI(model=" in msg  # reading 2
    with pytest.raises(ValueError, match=r"after '@' comes the base URL"):
        build_parallel_search_graph("openai:gpt-4o-mini@2024-08-06", wiki)
    with pytest.raises(ValueError, match=r"unknown policy 'vlm' \(did you mean 'vllm'\?\)"):
        create_parallel_search_agent("vlm:/models/ps-7b", wiki)


def test_a_pre_bound_chat_model_is_refused_at_build_time(openai_env):
    from langchain_core.tools import tool
    from langchain_openai import ChatOpenAI

    @tool
    def lookup(query: str) -> str:
        """Look something up."""
        return query

    model = ChatOpenAI(model="gpt-4o-mini")
    with pytest.raises(
        TypeError, match=r"ChatOpenAI bound to the tools \['lookup'\]; pass the chat model itself"
    ):
        create_parallel_search_agent(model.bind_tools([lookup]), wiki)
    for wrapped, kind in (
        (model.bind(temperature=0), "Binding"),
        (model.with_retry(), "RunnableRetry"),
        (model.with_fallbacks([model]), "RunnableWithFallbacks"),
    ):
        with pytest.raises(TypeError, match=f"ChatOpenAI inside a .*{kind}.*binds its own 'search' tool"):
            build_parallel_search_graph(wrapped, wiki)
    with pytest.raises(TypeError, match="bound to the tools"):
        create_parallel_search_agent("oracle", wiki, answer_model=model.bind_tools([lookup]))


def test_both_readings_of_openai_run_against_their_servers(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    chat_app, completions_app = make_openai_chat_test_server(), make_openai_test_server()
    with UvicornThread(chat_app) as chat_srv, UvicornThread(completions_app) as comp_srv:
        monkeypatch.setenv("OPENAI_BASE_URL", chat_srv.url + "/v1")
        chat = create_parallel_search_agent("openai:test-model", wiki).invoke({"question": Q})
        spec = f"openai:ps-7b@{comp_srv.url}/v1"
        tags = create_parallel_search_agent(spec, wiki).invoke({"question": Q})
    assert (chat["answer"], chat["protocol"], chat["subqueries"]) == ("yes", "tools", 2)
    assert chat_app.state.requests[0]["model"] == "test-model" and chat_app.state.requests[0]["tools"]
    assert (tags["answer"], tags["protocol"], tags["subqueries"]) == ("yes", "tags", 2)
    assert completions_app.state.requests[0]["model"] == "ps-7b"


@pytest.mark.parametrize(
    "keyword,hint",
    [
        ("k", "(did you mean 'top_k'?)"),
        ("topk", "(did you mean 'top_k'?)"),
        ("max_turn", "(did you mean 'max_turns'?)"),
        ("search_kwargs", "(did you mean 'top_k'?)"),
        ("max_steps", "(did you mean 'max_turns'?)"),
    ],
)
def test_an_unknown_keyword_is_a_type_error_naming_it_and_the_closest_known_one(keyword, hint):
    with pytest.raises(TypeError) as err:
        create_parallel_search_agent("oracle", wiki, **{keyword: 3})
    msg = str(err.value)
    assert msg.startswith(f"create_parallel_search_agent() got an unexpected keyword {keyword!r}")
    assert hint in msg and "Extra inputs" not in msg and "top_k" in msg.split("; its knobs are")[1]


@pytest.mark.parametrize("keyword", ["state_schema", "prompt"])
def test_a_create_agent_keyword_this_agent_does_not_take_says_why(keyword):
    with pytest.raises(TypeError, match=f"does not take {keyword}=: "):
        create_parallel_search_agent("oracle", wiki, **{keyword: 3})


def test_known_keywords_still_reach_the_graph():
    ks = []

    async def counting(query: str, k: int) -> list[Passage]:
        ks.append(k)
        return await wiki(query)

    agent = create_parallel_search_agent("oracle", counting, top_k=2, max_turns=2, protocol="tags")
    meta = {"golden_answers": ["yes"], "supporting_titles": ["Scott Derrickson", "Ed Wood"]}
    out = agent.invoke({"question": Q, "metadata": meta})
    assert out["status"] == "answered" and out["subqueries"] == 2 and ks == [2, 2]


def test_the_front_doors_searchers_checkpointer_and_store_are_typed_for_an_editor():
    """``tools``, ``searchers``, ``checkpointer`` and ``store`` carry the types an IDE shows (no
    ``Any``): the classes a user passes are named in them."""
    import types
    import typing

    from langchain_core.retrievers import BaseRetriever
    from langchain_core.vectorstores import VectorStore
    from langgraph.checkpoint.base import BaseCheckpointSaver
    from langgraph.store.base import BaseStore

    hints = typing.get_type_hints(create_parallel_search_agent)

    def members(hint: object) -> set[object]:
        """The classes a union names (a generic by its origin: ``Sequence[X]`` is Sequence and X)."""
        if hint is typing.Any:
            return {typing.Any}
        args = [a for a in typing.get_args(hint) if a is not typing.Any and a is not Ellipsis]
        origin = typing.get_origin(hint)
        own = set() if origin in (typing.Union, types.UnionType) else {origin or hint}
        return own | {m for a in args for m in members(a)}

    for name in ("tools", "searchers", "checkpointer", "store"):
        assert typing.Any not in members(hints[name]), name
    assert {BaseRetriever, VectorStore, str} <= members(hints["tools"]) and members(
        hints["tools"]
    ) == members(hints["searchers"])
    assert BaseCheckpointSaver in members(hints["checkpointer"]) and BaseStore in members(hints["store"])
