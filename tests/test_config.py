"""One way to configure anything: the config models, the factory, typed builders, per-request
configuration, and the precedence flag > environment > defaults at every entry point.

Every entry point runs for real against a loopback OpenAI-compatible test server (it
records the Authorization header, so the configured base URL and key are seen to arrive)
and a real Chroma store; ``top_k`` is read back from the passages each search returned.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import re
import typing

import httpx
import pytest
from conftest import ROOT, UvicornThread, fill_batch, needs_data
from pydantic import TypeAdapter
from servers import make_openai_test_server

from parallelsearch.agents.policies import OpenAICompletionsPolicy, PolicyConfig, ScriptedPolicy
from parallelsearch.agents.searchers import MultiStoreSearcher, RemoteSearcher, StoreSearcher
from parallelsearch.cli import build_parser, main
from parallelsearch.cli.common import settings_from_args
from parallelsearch.graphs import (
    PER_REQUEST_KEYS,
    GraphConfig,
    GraphContext,
    GraphOptions,
    build_graph,
    build_parallel_search_graph,
    build_sequential_graph,
    factory,
)
from parallelsearch.graphs.config import request_overrides
from parallelsearch.rl.agent_config import AgentConfig
from parallelsearch.settings import Settings, get_settings
from parallelsearch.stores.config import RetrievalConfig
from parallelsearch.stores.errors import StoreNotFoundError

Q = "Were Scott Derrickson and Ed Wood of the same nationality?"
SEARCH = ["<think> t </think><search> Scott Derrickson ## Ed Wood </search>", "<answer> yes </answer>"]


# ---- the models ------------------------------------------------------------------------------
def test_settings_share_the_config_models_and_graph_is_a_graph_config(monkeypatch):
    assert issubclass(Settings, RetrievalConfig) and issubclass(Settings, PolicyConfig)
    assert issubclass(AgentConfig, RetrievalConfig)
    monkeypatch.setenv("PARALLELSEARCH_GRAPH_CONFIG__TOP_K", "5")
    monkeypatch.setenv("PARALLELSEARCH_STORES", "wiki, news")
    s = get_settings()
    assert isinstance(s.graph_config, GraphConfig) and (s.graph_config.top_k, s.graph_config.max_turns) == (
        5,
        4,
    )
    assert s.graph_config.model_fields_set == {"top_k"} and s.stores == ["wiki", "news"]
    assert s.chroma_path == s.home / "chroma" and s.policy == "oracle"
    monkeypatch.delenv("PARALLELSEARCH_GRAPH_CONFIG__TOP_K")
    monkeypatch.setenv("PARALLELSEARCH_GRAPH_CONFIG", '{"max_turns": 2}')
    monkeypatch.setenv("PARALLELSEARCH_STORES", '["a"]')
    s = get_settings()
    assert (s.graph_config.top_k, s.graph_config.max_turns, s.stores) == (3, 2, ["a"])
    monkeypatch.setenv("PARALLELSEARCH_GRAPH_CONFIG", '{"top_k": 0}')
    with pytest.raises(ValueError, match="top_k"):
        get_settings()


def test_graph_config_has_one_spelling_and_the_removed_one_is_refused(monkeypatch, tmp_path):
    """``graph_config`` in Python, the environment and a config file; the spelling ``graph``
    (removed in 0.4; ``graph`` is a graph kind) is refused by name, never silently ignored, and an
    unrelated GRAPH variable is not read."""
    monkeypatch.setenv("GRAPH", '{"top_k": 9}')
    assert get_settings().graph_config.top_k == 3
    monkeypatch.setenv("PARALLELSEARCH_GRAPH_CONFIG__TOP_K", "6")
    assert get_settings().graph_config.top_k == 6
    assert get_settings(graph_config=GraphConfig(top_k=8)).graph_config.top_k == 8
    monkeypatch.delenv("PARALLELSEARCH_GRAPH_CONFIG__TOP_K")
    with pytest.raises(ValueError, match="graph .*the graph knobs are graph_config"):
        get_settings(graph={"top_k": 7})
    (tmp_path / "new.toml").write_text("[graph_config]\ntop_k = 5\n")
    monkeypatch.setenv("PARALLELSEARCH_CONFIG", str(tmp_path / "new.toml"))
    assert get_settings().graph_config.top_k == 5
    (tmp_path / "old.yaml").write_text("graph: {top_k: 4, max_turns: 1}\n")
    monkeypatch.setenv("PARALLELSEARCH_CONFIG", str(tmp_path / "old.yaml"))
    with pytest.raises(ValueError, match="graph_config"):
        get_settings()
    monkeypatch.delenv("PARALLELSEARCH_CONFIG")
    monkeypatch.setenv("PARALLELSEARCH_GRAPH__TOP_K", "4")
    with pytest.raises(ValueError, match="PARALLELSEARCH_GRAPH__TOP_K: the graph knobs are graph_config"):
        get_settings()


def test_openai_key_from_settings_only(monkeypatch):
    monkeypatch.delenv("PARALLELSEARCH_OPENAI_API_KEY", raising=False)
    monkeypatch.setenv("OPENAI_API_KEY", "from-openai-var")
    assert get_settings().openai_api_key == "from-openai-var"
    monkeypatch.setenv("PARALLELSEARCH_OPENAI_API_KEY", "ours")
    assert get_settings().openai_api_key == "ours"
    assert "ours" not in repr(get_settings())
    # the backend itself no longer reads the environment: the key comes from configuration
    assert OpenAICompletionsPolicy("m").api_key is None
    pol = factory.make_policy(
        PolicyConfig(policy="openai:m", openai_base_url="http://h:1/v1", openai_api_key="k")
    )
    assert (pol.base_url, pol.api_key) == ("http://h:1/v1", "k")
    assert factory.make_policy("openai:m@http://other:2/v1").base_url == "http://other:2/v1"


def test_graph_parts_build_what_the_kinds_need(tmp_path):
    """An answer policy only when one is configured; no store opened for the direct graph alone
    (the store named here does not exist, so opening it would fail)."""
    s = Settings(home=tmp_path, stores=["missing"], answer_policy="oracle", graph_config={"top_k": 2})
    parts = s.graph_parts(["direct"])
    assert parts.searcher is None and parts.answer_policy is not None and parts.config.top_k == 2
    assert parts.graph("direct").name == "direct"
    assert Settings(home=tmp_path).graph_parts(["direct"]).answer_policy is None
    with pytest.raises(StoreNotFoundError, match="no store named 'missing'"):
        s.graph_parts(["direct", "rag"])
    with pytest.raises(ValueError, match="unknown graph 'dag2'"):
        s.graph_parts(["dag2"])


def test_factory_builds_searchers_from_one_retrieval_config(hotpot_store, tmp_path):
    cfg = RetrievalConfig(stores=[hotpot_store.name], chroma_path=hotpot_store.location)
    one = factory.make_searcher(cfg)
    assert isinstance(one, StoreSearcher) and one.store.count() == hotpot_store.count()
    other = RetrievalConfig(chroma_path=tmp_path / "chroma", stores=["wiki", "news"])
    for name in other.stores:
        factory.make_store(other, name, create=True)
    two = factory.make_searcher(other)
    assert isinstance(two, MultiStoreSearcher) and two.store_names() == ["wiki", "news"]
    assert sorted(row["name"] for row in factory.describe_stores(other)) == ["news", "wiki"]
    assert {st.store.embedder for st in two.searchers.values()} == {factory.make_embedder(other)}
    remote = factory.make_searcher(RetrievalConfig(retriever_url="http://127.0.0.1:9/retrieve"))
    assert isinstance(remote, RemoteSearcher) and remote.client.url == "http://127.0.0.1:9/retrieve"
    with pytest.raises(ValueError, match="no store to search"):
        factory.make_searcher(RetrievalConfig())
    with pytest.raises(ValueError, match="set one"):
        factory.make_searcher(RetrievalConfig(stores=["a"], retriever_url="http://x/retrieve"))


def test_agent_config_uses_the_same_factory(hotpot_store):
    cfg = AgentConfig(chroma_path=hotpot_store.location, store=hotpot_store.name)
    assert cfg.stores == [hotpot_store.name] and isinstance(cfg.retrieval(), RetrievalConfig)
    import torch

    with pytest.warns(UserWarning, match="embedded Chroma store"):
        searcher = cfg.make_searcher()
    assert isinstance(searcher, StoreSearcher)
    assert searcher.store.embedder.run(torch.get_num_threads) == 1  # the agent config's default
    with pytest.raises(ValueError, match="choose one of parallel, sequential"):
        AgentConfig(retriever_url="http://x/retrieve", graph="rag")
    # constrained decoding has the settings' name and bounds; files of earlier releases still load
    url = "http://x/retrieve"
    assert AgentConfig(retriever_url=url, constrained=True).constrained
    assert not AgentConfig(retriever_url=url).constrained
    with pytest.raises(ValueError, match="constrained_decoding"):  # the spelling removed in 0.4
        AgentConfig(retriever_url=url, constrained_decoding=True)
    with pytest.raises(ValueError, match="constrained_think_chars"):
        AgentConfig(retriever_url=url, constrained_think_chars=100_001)


# ---- typed builders --------------------------------------------------------------------------
def test_builders_take_typed_options_and_return_compiled_graphs(hotpot_store):
    from parallelsearch.graphs.builders import BuilderOptions

    assert set(typing.get_type_hints(GraphOptions)) == set(GraphConfig.model_fields)
    beside = set(typing.get_type_hints(BuilderOptions)) - set(GraphConfig.model_fields)
    assert beside == {"answer_policy", "checkpointer", "config"}
    typed = {build_parallel_search_graph: "BuilderOptions", build_sequential_graph: "BuilderOptions"}
    for builder, options in {**typed, build_graph: "GraphOptions"}.items():
        sig = inspect.signature(builder)
        assert f"Unpack[{options}]" in str(sig.parameters["options"].annotation)
        assert sig.return_annotation == "SearchGraph"
    assert "config" in inspect.signature(build_graph).parameters
    from langgraph.graph.state import CompiledStateGraph

    policy = ScriptedPolicy(SEARCH)
    old_style = build_parallel_search_graph(policy, hotpot_store, top_k=1, max_turns=2)  # **config calls
    via_config = build_parallel_search_graph(policy, hotpot_store, config=GraphConfig(top_k=1))
    assert isinstance(old_style, CompiledStateGraph) and isinstance(via_config, CompiledStateGraph)
    out = asyncio.run(via_config.ainvoke({"question": Q}))
    assert out["passages"] == 2
    # keyword options win over config; the sequential graph keeps its own template unless given one
    seq = build_sequential_graph(policy, hotpot_store, config=GraphConfig(top_k=1), top_k=2)
    out = asyncio.run(seq.ainvoke({"question": Q}))
    assert out["passages"] == 2 and "decompose" not in out["transcript"].split("Question:")[0]
    with pytest.raises(ValueError, match="top_k"):
        build_parallel_search_graph(policy, hotpot_store, top_k=0)
    with pytest.raises(ValueError, match="unknown graph"):
        build_graph("nope", policy, hotpot_store)


def test_cli_choices_are_the_literals():
    """Every ``choices=`` list of the CLI is a Literal's values, so a new value reaches the flags."""
    from parallelsearch.agents.resolvers import ResolverName
    from parallelsearch.cli import build_parser
    from parallelsearch.data.questions import Split
    from parallelsearch.rl.launch import Runner
    from parallelsearch.settings import CheckpointerKind
    from parallelsearch.stores.chroma_store import Space
    from parallelsearch.stores.config import EncoderBackend

    subparsers = next(a for a in build_parser()._actions if a.choices and isinstance(a.choices, dict))
    choices = {
        (cmd, a.dest): tuple(a.choices)
        for cmd, sub in subparsers.choices.items()
        for a in sub._actions
        if a.choices is not None
    }
    expected = {
        ("ask", "resolver"): ResolverName,
        ("eval", "split"): Split,
        ("train", "runner"): Runner,
        ("serve", "checkpointer"): CheckpointerKind,
        ("index", "encoder_backend"): EncoderBackend,
        ("index", "space"): Space,
    }
    for key, literal in expected.items():
        assert choices[key] == typing.get_args(literal), key


# ---- per request -----------------------------------------------------------------------------
def test_every_knob_has_one_declaration_and_the_same_bounds_per_request():
    """GraphOptions and GraphContext use GraphConfig's field types, so a value GraphConfig refuses a
    request refuses too (and the reverse), with the same bounds in the JSON schemas."""
    config = typing.get_type_hints(GraphConfig, include_extras=True)
    options = typing.get_type_hints(GraphOptions, include_extras=True)
    context = typing.get_type_hints(GraphContext, include_extras=True)
    assert set(options) == set(GraphConfig.model_fields) and set(context) == set(PER_REQUEST_KEYS)
    # a builder also takes a resolver function or object and a protocol object
    assert {k for k in options if options[k] != config[k]} == {"resolver", "protocol"}
    assert all(context[k] == config[k] for k in context)
    built = GraphConfig.model_json_schema()["properties"]
    per_request = TypeAdapter(GraphContext).json_schema()["properties"]
    for key in PER_REQUEST_KEYS:
        assert {k: v for k, v in built[key].items() if k != "default"} == per_request[key], key
        bounds = {
            k: v for k, v in per_request[key].items() if k in ("minimum", "maximum", "exclusiveMinimum")
        }
        for bound, value in bounds.items():
            step = 1 if per_request[key].get("type") == "integer" else 1e-9
            bad = value - step if bound == "minimum" else value + step if bound == "maximum" else value
            with pytest.raises(ValueError, match=key):
                GraphConfig(**{key: bad})
            with pytest.raises(ValueError, match=key):
                request_overrides({key: bad})
            assert request_overrides({key: value if bound != "exclusiveMinimum" else value + step})


def test_per_request_configuration(hotpot_store):
    graph = build_parallel_search_graph(ScriptedPolicy(SEARCH), hotpot_store)
    schema = graph.get_context_jsonschema()
    assert set(PER_REQUEST_KEYS) == set(schema["properties"]) >= {"top_k", "max_turns", "max_subqueries"}

    def run(**kw):
        return asyncio.run(graph.ainvoke({"question": Q}, **kw))

    assert run()["passages"] == 6
    assert run(config={"configurable": {"top_k": 1, "thread_id": "x"}})["passages"] == 2
    assert run(context={"top_k": 2})["passages"] == 4
    assert run(context={"max_subqueries": 1})["subqueries"] == 0  # two sub-queries are now invalid
    assert run(config={"configurable": {"max_turns": 0}})["policy_calls"] == 1
    with pytest.raises(ValueError, match="top_k"):
        run(config={"configurable": {"top_k": 0}})
    rag = build_graph("rag", ScriptedPolicy(["<answer> x </answer>"]), hotpot_store)
    out = asyncio.run(rag.ainvoke({"question": Q}, config={"configurable": {"max_turns": 5, "top_k": 1}}))
    assert out["policy_calls"] == 1 and out["passages"] == 1  # rag keeps its single turn


@needs_data
def test_served_graph_is_tuned_per_call(hotpot_store):
    from parallelsearch.serving.server import create_app

    app = create_app(Settings(), policy=ScriptedPolicy(SEARCH), searcher=hotpot_store)
    with UvicornThread(app) as srv:
        schema = httpx.get(srv.url + "/parallelsearch/config_schema", timeout=30).json()
        text = json.dumps(schema)
        assert all(k in text for k in ("top_k", "max_turns", "max_subqueries", "temperature"))
        body = {"input": {"question": Q}, "config": {"configurable": {"top_k": 1}}}
        out = httpx.post(srv.url + "/parallelsearch/invoke", json=body, timeout=60).json()["output"]
        assert out["passages"] == 2
        out = httpx.post(srv.url + "/parallelsearch/invoke", json={"input": {"question": Q}}, timeout=60)
        assert out.json()["output"]["passages"] == 6


# ---- precedence at every entry point: flag > environment > defaults ----------------------------
CASES = [("flag", "2", 1, 1), ("env", "2", None, 2), ("default", None, None, 3)]


@pytest.fixture()
def configured(monkeypatch, hotpot_store):
    """Settings through the environment: the store, an OpenAI-compatible test server, its key."""
    app = make_openai_test_server()
    with UvicornThread(app) as srv:
        monkeypatch.setenv("PARALLELSEARCH_CHROMA_PATH", hotpot_store.location)
        monkeypatch.setenv("PARALLELSEARCH_STORES", hotpot_store.name)
        monkeypatch.setenv("PARALLELSEARCH_POLICY", "openai:test-model")
        monkeypatch.setenv("PARALLELSEARCH_OPENAI_BASE_URL", srv.url + "/v1")
        monkeypatch.setenv("PARALLELSEARCH_OPENAI_API_KEY", "sekret")
        yield app


def _set_env_top_k(monkeypatch, env):
    if env is None:
        monkeypatch.delenv("PARALLELSEARCH_GRAPH_CONFIG__TOP_K", raising=False)
    else:
        monkeypatch.setenv("PARALLELSEARCH_GRAPH_CONFIG__TOP_K", env)


def _flag(flag):
    return ["--top-k", str(flag)] if flag is not None else []


def _key_arrived(app):
    assert app.state.auth and set(app.state.auth) == {"Bearer sekret"}


@needs_data
@pytest.mark.parametrize(("case", "env", "flag", "expected"), CASES)
def test_precedence_ask(configured, monkeypatch, capsys, case, env, flag, expected):
    _set_env_top_k(monkeypatch, env)
    assert main(["ask", Q, "--json", *_flag(flag)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["subqueries"] == 2 and out["passages"] == 2 * expected
    _key_arrived(configured)


@needs_data
@pytest.mark.parametrize("command", ["eval", "rollout"])
@pytest.mark.parametrize(("case", "env", "flag", "expected"), CASES)
def test_precedence_eval_and_rollout(
    configured, monkeypatch, hotpot_comparison_file, tmp_path, command, case, env, flag, expected
):
    _set_env_top_k(monkeypatch, env)
    out, data = tmp_path / "out", str(hotpot_comparison_file)
    if command == "eval":
        argv, rows = ["eval", "--dataset", data, "--graphs", "parallel", "--no-plots"], out / "results.jsonl"
    else:
        argv, rows = ["rollout", "--data", data], out
    assert main([*argv, "--limit", "1", "--out", str(out), *_flag(flag)]) == 0
    row = json.loads(rows.read_text().splitlines()[0])
    assert row["error"] is None and row["passages"] == 2 * expected
    _key_arrived(configured)


@needs_data
@pytest.mark.parametrize(("case", "env", "flag", "expected"), CASES)
def test_precedence_serve(configured, monkeypatch, case, env, flag, expected):
    import uvicorn

    _set_env_top_k(monkeypatch, env)
    apps = []
    monkeypatch.setattr(uvicorn, "run", lambda app, **kw: apps.append(app))
    assert main(["serve", *_flag(flag)]) == 0
    with UvicornThread(apps[0]) as srv:
        assert httpx.get(srv.url + "/health", timeout=10).json()["graph"]["top_k"] == expected
        r = httpx.post(srv.url + "/parallelsearch/invoke", json={"input": {"question": Q}}, timeout=60)
    assert r.status_code == 200 and r.json()["output"]["passages"] == 2 * expected
    _key_arrived(configured)


@needs_data
def test_serve_and_ask_build_the_same_graph_from_the_same_flags(
    configured, hotpot_store, monkeypatch, capsys
):
    """One path from settings to graphs: with the same flags over the same environment, the
    served route and ``ask`` send the policy server the same requests and return the same run."""
    import uvicorn

    flags = ["--store", hotpot_store.name, "--top-k", "2", "--max-turns", "3", "--template", "official"]
    flags += ["--answer-policy", "openai:test-model"]
    apps = []
    monkeypatch.setattr(uvicorn, "run", lambda app, **kw: apps.append(app))
    assert main(["serve", *flags]) == 0
    with UvicornThread(apps[0]) as srv:
        health = httpx.get(srv.url + "/health", timeout=10).json()
        r = httpx.post(srv.url + "/parallelsearch/invoke", json={"input": {"question": Q}}, timeout=60)
    assert r.status_code == 200 and health["graph"]["top_k"] == 2 and health["graph"]["max_turns"] == 3
    served, served_requests = r.json()["output"], list(configured.state.requests)
    configured.state.requests.clear()
    capsys.readouterr()
    assert main(["ask", Q, "--json", *flags]) == 0
    asked = json.loads(capsys.readouterr().out)
    # three: the search turn, the planner choosing to answer, the answer policy's answer turn
    assert configured.state.requests == served_requests and len(served_requests) == 3
    assert "as many times as your want" in served_requests[0]["prompt"]  # the official template
    keys = ("answer", "status", "transcript", "policy_calls", "search_rounds", "subqueries", "passages")
    assert {k: served[k] for k in keys} == {k: asked[k] for k in keys} and asked["passages"] == 4


@needs_data
@pytest.mark.parametrize(("case", "env", "flag", "expected"), CASES)
def test_precedence_demo(configured, monkeypatch, tmp_path, case, env, flag, expected):
    _set_env_top_k(monkeypatch, env)
    out = tmp_path / "demo"
    assert main(["demo", "--limit", "1", "--out", str(out), *_flag(flag)]) == 0
    rows = [json.loads(x) for x in (out / "results.jsonl").read_text().splitlines()]
    assert rows and all(r["error"] is None and r["passages"] == r["subqueries"] * expected for r in rows)
    _key_arrived(configured)


@needs_data
@pytest.mark.parametrize(("case", "env", "flag", "expected"), [c for c in CASES if c[2] is None])
def test_precedence_langgraph_app(configured, monkeypatch, case, env, flag, expected):
    import importlib
    import sys

    _set_env_top_k(monkeypatch, env)
    sys.modules.pop("parallelsearch.langgraph_app", None)
    mod = importlib.import_module("parallelsearch.langgraph_app")
    out = asyncio.run(mod.graph.ainvoke({"question": Q}))
    assert out["passages"] == 2 * expected and mod.graph.get_context_jsonschema()["properties"]["top_k"]
    _key_arrived(configured)


@needs_data
def test_precedence_agent_config_and_train_overrides(tmp_path, monkeypatch, capsys):
    """The agent config file > GraphConfig defaults; ``train --set`` > the preset."""
    from parallelsearch.rl.agent_config import load_agent_config

    path = tmp_path / "agent.yaml"
    path.write_text("retriever_url: http://127.0.0.1:9/retrieve\ngraph_config:\n  top_k: 2\n")
    assert load_agent_config(path).graph_config.top_k == 2
    path.write_text("retriever_url: http://127.0.0.1:9/retrieve\n")
    assert load_agent_config(path).graph_config.top_k == 3
    from parallelsearch.data import load_questions
    from parallelsearch.demo_data import HOTPOTQA_SAMPLE
    from parallelsearch.rl.data import train_record

    data = tmp_path / "train.jsonl"
    data.write_text(json.dumps(train_record(load_questions(HOTPOTQA_SAMPLE)[0], template="official")) + "\n")
    argv = [
        "train",
        "--preset",
        "paper",
        "--dry-run",
        "--skip-probe",
        "--set",
        f"prompt_data={fill_batch(data)}",
    ]
    assert main([*argv, "--set", "agent.graph_config.top_k=5"]) == 0
    assert "top_k: 5" in capsys.readouterr().out


def test_encoder_threads_size_the_encoder_team_and_rollout_actors_default_to_one(monkeypatch):
    """A rollout actor's embedded encoder must not take every core from the vLLM engine beside it."""
    import argparse

    import torch

    from parallelsearch.cli.common import add_chroma_args, settings_from_args
    from parallelsearch.stores.encoding.embedder import make_embedder

    assert make_embedder(RetrievalConfig(encoder_threads=1)).run(torch.get_num_threads) == 1
    agent = AgentConfig(retriever_url="http://127.0.0.1:9/retrieve")
    assert agent.encoder_threads == 1
    assert agent.encoder_workers == 1  # one encoder thread: ONNX would otherwise take every core
    assert agent.retrieval().encoder_threads == 1  # what make_searcher is given
    assert RetrievalConfig().encoder_threads is None  # elsewhere torch's default
    with pytest.raises(ValueError, match="encoder_threads"):
        RetrievalConfig(encoder_threads=0)
    # precedence: flag > environment > default
    p = argparse.ArgumentParser()
    add_chroma_args(p)
    monkeypatch.setenv("PARALLELSEARCH_ENCODER_THREADS", "2")
    assert settings_from_args(p.parse_args([])).encoder_threads == 2
    assert settings_from_args(p.parse_args(["--encoder-threads", "1"])).encoder_threads == 1


def test_a_searcher_kind_is_one_registry_entry_selectable_from_config(monkeypatch):
    """``RetrievalConfig.searcher`` names a kind of ``factory.SEARCHER_KINDS``: a new kind is one
    entry there (and its module), chosen by the settings like the built-in ones."""
    from parallelsearch.stores.passages import Passage

    class Echo:
        name = "echo"

        async def asearch(self, query: str, k: int) -> list[Passage]:
            return [Passage(id=query, title=query.title(), text=f"about {query}")]

    monkeypatch.setitem(factory.SEARCHER_KINDS, "echo", lambda cfg: Echo())
    monkeypatch.setenv("PARALLELSEARCH_SEARCHER", "echo")
    parts = get_settings().graph_parts(["parallel"])
    meta = {"golden_answers": ["Greyia"], "supporting_titles": ["greyia", "calibanus"], "split": "parallel"}
    out = parts.graph("parallel").invoke({"question": "Which genus has more species?", "metadata": meta})
    assert out["answer"] == "Greyia" and "Doc 1(Title: Calibanus) about calibanus" in out["transcript"]
    monkeypatch.setenv("PARALLELSEARCH_SEARCHER", "ehco")
    with pytest.raises(ValueError, match="unknown searcher 'ehco'.*echo"):
        get_settings().graph_parts(["parallel"])
    # the command line lists and selects the registered kinds (a flag over the environment)
    monkeypatch.delenv("PARALLELSEARCH_SEARCHER")
    parser = build_parser()
    ask = parser._subparsers._group_actions[0].choices["ask"]
    assert "echo" in " ".join(ask.format_help().split())
    assert settings_from_args(ask.parse_args(["--searcher", "echo", "a question"])).searcher_kind() == "echo"


def test_env_example_names_the_store_make_demo_builds(monkeypatch, tmp_path):
    """``.env.example`` (what ``langgraph dev`` reads once copied to ``.env``) searches the store
    ``make demo`` builds, where it builds it, and its policy spec reads as a policy."""
    from parallelsearch.demo_data import DEMO_STORE
    from parallelsearch.settings import Settings

    values = dict(
        line.split("=", 1)
        for line in (ROOT / ".env.example").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    )
    make_home = re.search(
        r"PARALLELSEARCH_HOME=\$\$\{PARALLELSEARCH_HOME:-([^}]+)\}", (ROOT / "Makefile").read_text()
    )
    assert make_home and values["PARALLELSEARCH_HOME"] == make_home.group(1)
    monkeypatch.chdir(tmp_path)
    for key, value in values.items():
        monkeypatch.setenv(key, value)
    settings = Settings()
    assert settings.retrieval().stores == [DEMO_STORE]
    where = (tmp_path / make_home.group(1) / "chroma").resolve()
    assert settings.retrieval().chroma_path.resolve() == where  # relative: from where the server runs
    assert isinstance(factory.make_policy(settings.policy_config()), OpenAICompletionsPolicy)


def test_a_faiss_path_is_refused_naming_store_path(monkeypatch, tmp_path):
    """The FAISS stores' folder is ``store_path``: the other spelling, as a key or a variable, is an
    error naming it and the setting to use, never dropped (the stores then looked for elsewhere)."""
    monkeypatch.delenv("PARALLELSEARCH_FAISS_PATH", raising=False)
    with pytest.raises(ValueError, match="faiss_path .*store_path now"):
        Settings(home=tmp_path, faiss_path=tmp_path / "faiss-stores")
    monkeypatch.setenv("PARALLELSEARCH_FAISS_PATH", str(tmp_path / "faiss-stores"))
    with pytest.raises(ValueError, match="PARALLELSEARCH_FAISS_PATH: .*PARALLELSEARCH_STORE_PATH"):
        Settings(home=tmp_path)
    monkeypatch.delenv("PARALLELSEARCH_FAISS_PATH")
    kept = Settings(home=tmp_path, store_kind="faiss", store_path=tmp_path / "faiss-stores")
    assert kept.kind_folder() == tmp_path / "faiss-stores"
