"""End-to-end LangGraph runs over a real Chroma store with scripted/oracle policies, plus faults."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys

import pytest
from conftest import needs_data

from parallelsearch.agents.policies import OraclePolicy, ScriptedPolicy
from parallelsearch.graphs import build_graph, build_parallel_search_graph, build_sequential_graph
from parallelsearch.stores import Passage

pytestmark = needs_data
Q = "Were Scott Derrickson and Ed Wood of the same nationality?"
PAR = [
    "<think>two people</think>\n<search> Scott Derrickson nationality ## Ed Wood nationality </search>",
    "<think>both American</think>\n<answer> yes </answer>",
]
SEQ = [
    "<search> Scott Derrickson nationality </search>",
    "<search> Ed Wood nationality </search>",
    "<answer> yes </answer>",
]


def run(graph, inp, **kw):
    return asyncio.run(graph.ainvoke(inp, **kw))


def test_parallel_comparison_is_two_calls_one_round(hotpot_store):
    out = run(build_parallel_search_graph(ScriptedPolicy(PAR), hotpot_store), {"question": Q})
    assert (out["policy_calls"], out["search_rounds"], out["subqueries"], out["answer"]) == (2, 1, 2, "yes")
    assert out["passages"] == 6 and out["errors"] == 0 and out["status"] == "answered"
    obs = [s for s in out["trajectory"] if s["type"] == "observation"][0]
    assert [r["query"] for r in obs["results"]] == ["Scott Derrickson nationality", "Ed Wood nationality"]
    assert obs["results"][0]["passages"][0]["title"] == "Scott Derrickson"
    assert out["transcript"].count("\n\n<information>") == 1  # the prompt mentions the tag once more
    assert out["transcript"].startswith("Answer the given question.")
    assert set(out["node_ms"]) == {"planner", "search", "join", "answer"} and out["total_ms"] > 0


def test_sequential_baseline_takes_three_calls(hotpot_store):
    out = run(build_sequential_graph(ScriptedPolicy(SEQ), hotpot_store), {"question": Q})
    assert (out["policy_calls"], out["search_rounds"], out["subqueries"]) == (3, 2, 2)
    # the Search-R1 graph never splits '##'
    out2 = run(build_sequential_graph(ScriptedPolicy(PAR), hotpot_store), {"question": Q})
    assert out2["subqueries"] == 1 and "##" not in out2["transcript"].split("Question:")[0]


def test_oracle_parallel_vs_sequential(hotpot_store, hotpot_questions):
    q = hotpot_questions[0]
    inp = {"question": q["question"], "metadata": {**q["metadata"], "golden_answers": q["golden_answers"]}}
    par = run(build_graph("parallel", OraclePolicy(), hotpot_store), inp)
    seq = run(build_graph("sequential", OraclePolicy(), hotpot_store), inp)
    assert (par["policy_calls"], seq["policy_calls"]) == (2, 3)
    assert par["labels"] == ["oracle"] and par["answer"] == "yes"


def test_rag_and_direct(hotpot_store):
    rag = run(build_graph("rag", ScriptedPolicy(["<answer> yes </answer>"]), hotpot_store), {"question": Q})
    assert (rag["policy_calls"], rag["search_rounds"], rag["subqueries"], rag["answer"]) == (1, 1, 1, "yes")
    direct = run(build_graph("direct", ScriptedPolicy(["<answer> no </answer>"])), {"question": Q})
    assert (direct["policy_calls"], direct["search_rounds"], direct["answer"]) == (1, 0, "no")


class BarrierSearcher:
    """Each query waits until every other query of the round has started: passes only if they run concurrently."""

    def __init__(self, n: int):
        self.n, self.started, self.finished_before_all_started = n, 0, False
        self.events: list[str] = []
        self._all = None

    async def asearch(self, query, k=3):
        if self._all is None:
            self._all = asyncio.Event()
        self.started += 1
        self.events.append(f"start {query}")
        if self.started == self.n:
            self._all.set()
        await asyncio.wait_for(self._all.wait(), timeout=5)
        self.events.append(f"end {query}")
        return [Passage(query, query, f"about {query}", 1.0, "barrier")]


def test_searcher_nodes_run_concurrently_structurally():
    s = BarrierSearcher(2)
    out = run(
        build_parallel_search_graph(ScriptedPolicy(PAR), s, search_timeout_s=10, search_retries=0),
        {"question": Q},
    )
    assert out["errors"] == 0, out["trajectory"]
    assert s.events[:2] == ["start Scott Derrickson nationality", "start Ed Wood nationality"]


def test_max_concurrency_one_serialises_and_the_barrier_times_out():
    s = BarrierSearcher(2)
    out = run(
        build_parallel_search_graph(
            ScriptedPolicy(PAR), s, max_concurrency=1, search_timeout_s=0.5, search_retries=0
        ),
        {"question": Q},
    )
    assert out["errors"] >= 1 and "timed out" in out["transcript"]


class Raising:
    async def asearch(self, query, k=3):
        raise ConnectionError(f"index offline for {query}")


class Hanging:
    async def asearch(self, query, k=3):
        await asyncio.sleep(3600)


@pytest.mark.parametrize(
    "searcher,needle", [(Raising(), "ConnectionError: index offline"), (Hanging(), "timed out after 0.2 s")]
)
def test_failing_searchers_become_error_entries(searcher, needle):
    out = run(
        build_parallel_search_graph(ScriptedPolicy(PAR), searcher, search_timeout_s=0.2, search_retries=1),
        {"question": Q},
    )
    assert out["answer"] == "yes" and out["errors"] == 2 and out["search_rounds"] == 1
    assert needle in out["transcript"] and "(2 attempts)" in out["transcript"]


def test_fifty_subqueries_is_an_invalid_action_with_feedback(hotpot_store):
    many = "<search> " + " ## ".join(f"entity {i}" for i in range(50)) + " </search>"
    out = run(
        build_parallel_search_graph(ScriptedPolicy([many, "<answer> yes </answer>"]), hotpot_store),
        {"question": Q},
    )
    assert out["search_rounds"] == 0 and out["policy_calls"] == 2 and out["answer"] == "yes"
    assert "My previous action is invalid" in out["transcript"]
    assert "50 sub-queries" in out["trajectory"][0]["reason"]


def test_empty_subqueries_and_max_turns(hotpot_store):
    out = run(
        build_parallel_search_graph(ScriptedPolicy(["<search> ## ## </search>"]), hotpot_store, max_turns=2),
        {"question": Q},
    )
    assert out["policy_calls"] == 3 and out["search_rounds"] == 0 and out["answer"] is None
    assert out["status"] == "unanswered" and out["trajectory"][-1]["final"]


def test_final_turn_cannot_search(hotpot_store):
    out = run(
        build_parallel_search_graph(
            ScriptedPolicy(["<search> Ed Wood </search>"]), hotpot_store, max_turns=1
        ),
        {"question": Q},
    )
    assert (out["policy_calls"], out["search_rounds"], out["status"]) == (2, 1, "unanswered")
    assert out["trajectory"][-1]["reason"] == "searching is disabled in the final turn"


def test_subgraph_inside_a_user_graph(hotpot_store):
    from langgraph.graph import END, START, StateGraph
    from typing_extensions import TypedDict

    class Outer(TypedDict, total=False):
        question: str
        answer: str | None
        policy_calls: int
        shout: str

    inner = build_parallel_search_graph(ScriptedPolicy(PAR), hotpot_store)
    b = StateGraph(Outer)
    b.add_node("research", inner)
    b.add_node("shout", lambda s: {"shout": (s["answer"] or "").upper() + "!"})
    b.add_edge(START, "research")
    b.add_edge("research", "shout")
    b.add_edge("shout", END)
    out = run(b.compile(), {"question": Q})
    assert out["shout"] == "YES!" and out["policy_calls"] == 2


def test_checkpointer_thread_and_stream_modes(hotpot_store):
    from langgraph.checkpoint.memory import InMemorySaver

    g = build_parallel_search_graph(ScriptedPolicy(PAR), hotpot_store, checkpointer=InMemorySaver())
    cfg = {"configurable": {"thread_id": "t1"}}

    async def go():
        nodes = []
        async for upd in g.astream({"question": Q}, cfg, stream_mode="updates"):
            nodes.extend(upd)
        return nodes

    nodes = asyncio.run(go())
    assert nodes == ["begin", "planner", "search", "search", "join", "planner", "answer"]
    snap = g.get_state(cfg)
    assert snap.values["answer"] == "yes" and snap.values["policy_calls"] == 2


def test_langchain_callbacks_see_the_nodes(hotpot_store):
    from langchain_core.callbacks import BaseCallbackHandler

    class Names(BaseCallbackHandler):
        def __init__(self):
            self.names = []

        def on_chain_start(self, serialized, inputs, **kw):
            self.names.append(kw.get("name"))

    h = Names()
    run(
        build_parallel_search_graph(ScriptedPolicy(PAR), hotpot_store),
        {"question": Q},
        config={"callbacks": [h]},
    )
    assert {"planner", "search", "join", "answer"} <= set(h.names)


def test_bad_input_is_a_clear_error(hotpot_store):
    with pytest.raises(ValueError, match="non-empty 'question'"):
        run(build_parallel_search_graph(ScriptedPolicy(PAR), hotpot_store), {"question": "  "})
    with pytest.raises(ValueError, match="unknown graph"):
        build_graph("tree", ScriptedPolicy(PAR))
    with pytest.raises(Exception, match="top_k"):
        build_parallel_search_graph(ScriptedPolicy(PAR), hotpot_store, top_k=0)


def test_multi_store_routing_and_rrf(hotpot_store, embedder, tmp_path):
    from conftest import RAW

    from parallelsearch.agents.searchers import MultiStoreSearcher, StoreSearcher
    from parallelsearch.stores import ChromaStore, ingest

    wiki = ChromaStore("wiki", path=tmp_path / "db", embedder=embedder)
    ingest(wiki, [RAW / "wiki_corpus/PeterGriffinJin_Search-R1/corpus.jsonl"], progress=False)
    multi = MultiStoreSearcher({"hotpot": StoreSearcher(hotpot_store), "wiki": StoreSearcher(wiki)})
    script = ["<search> wiki: Genentech lobbyist ## Ed Wood </search>", "<answer> x </answer>"]
    out = run(build_parallel_search_graph(ScriptedPolicy(script), multi), {"question": Q})
    res = [s for s in out["trajectory"] if s["type"] == "observation"][0]["results"]
    assert {p["store"] for p in res[0]["passages"]} == {"wiki"}
    assert {p["store"] for p in res[1]["passages"]} <= {"hotpot", "wiki"} and res[1]["passages"][0][
        "title"
    ] == "Ed Wood"
    assert "Available knowledge stores: hotpot, wiki" in out["transcript"]


def test_ask_cli_json(tmp_path, hotpot_store, capsys):
    """``parallelsearch ask --json`` as its own process over a copy of the session's store, then
    the plain and the failing forms in-process (the same ``main``)."""
    import os
    import shutil

    from parallelsearch.cli import main

    home = tmp_path / "home"  # the test's home (conftest's _isolated_home)
    shutil.copytree(hotpot_store.location, home / "chroma")
    env = dict(os.environ, PARALLELSEARCH_HOME=str(home))
    script = tmp_path / "par.json"
    script.write_text(json.dumps(PAR))
    ask = ["ask", Q, "--store", hotpot_store.name, "--policy"]
    r = subprocess.run([sys.executable, "-m", "parallelsearch.cli", *ask, f"scripted:{script}", "--json"],
                       env=env, capture_output=True, text=True, timeout=300)  # fmt: skip
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert (d["policy_calls"], d["search_rounds"], d["subqueries"], d["answer"]) == (2, 1, 2, "yes")
    assert main([*ask, f"scripted:{script}"]) == 0
    out = capsys.readouterr().out
    assert "search round 1" in out and "policy calls 2" in out
    assert main([*ask, "scripted:/nope.json"]) == 2
    assert "does not exist" in capsys.readouterr().err
