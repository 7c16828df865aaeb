"""Threads: every run with a new question is a fresh episode; the thread keeps the earlier ones.

Real graphs over a real Chroma store with LangGraph's in-memory checkpointer (the served
checkpointers are tested in tests/test_threads.py and the serving tier).
"""

from __future__ import annotations

import asyncio

import pytest
from conftest import needs_data

from parallelsearch.agents.policies import OraclePolicy, ScriptedPolicy
from parallelsearch.graphs import build_graph

pytestmark = needs_data
Q1 = "Were Scott Derrickson and Ed Wood of the same nationality?"
Q2 = "Which magazine was started first, Arthur's Magazine or First for Women?"
PAR = [
    "<think>two people</think>\n<search> Scott Derrickson nationality ## Ed Wood nationality </search>",
    "<think>both American</think>\n<answer> yes </answer>",
]


def saver():
    from langgraph.checkpoint.memory import InMemorySaver

    return InMemorySaver()


async def _two_runs(graph, cfg, first, second):
    out1 = await graph.ainvoke(first, cfg)
    out2 = await graph.ainvoke(second, cfg)
    state = await graph.aget_state(cfg)
    history = [s async for s in graph.aget_state_history(cfg)]
    return out1, out2, state, history


@pytest.mark.parametrize("kind", ["parallel", "sequential", "rag", "direct"])
def test_second_question_on_a_thread_is_a_fresh_episode(hotpot_store, kind):
    turns = PAR if kind in ("parallel", "sequential") else ["<answer> yes </answer>"]
    graph = build_graph(kind, ScriptedPolicy(turns), hotpot_store, checkpointer=saver())
    cfg = {"configurable": {"thread_id": f"t-{kind}"}}
    out1, out2, state, history = asyncio.run(_two_runs(graph, cfg, {"question": Q1}, {"question": Q2}))
    # the second run starts over: same counts as the first, its own question in the prompt
    for key in ("policy_calls", "search_rounds", "subqueries", "passages", "answer", "status"):
        assert out2[key] == out1[key], key
    assert f"Question: {Q2}\n" in out2["transcript"] and f"Question: {Q1}" not in out2["transcript"]
    assert f"User: {Q1}\nAssistant: yes\nQuestion: {Q2}" in out2["transcript"]  # the thread, as memory
    assert len(out2["trajectory"]) == len(out1["trajectory"])
    assert set(out2["node_ms"]) == set(out1["node_ms"])
    values = state.values
    assert values["question"] == Q2 and values["answer"] == "yes"
    assert len(values.get("results") or []) == out1["subqueries"]  # this episode's searches only
    # the thread keeps both episodes: records in `history`, full states in the checkpoints
    recs = values["history"]
    assert [r["episode"] for r in recs] == [0, 1]
    assert [r["question"] for r in recs] == [Q1, Q2]
    assert [r["status"] for r in recs] == ["answered", "answered"]
    assert recs[0]["policy_calls"] == out1["policy_calls"]
    first_final = [
        s for s in history if s.values.get("question") == Q1 and s.values.get("status") == "answered"
    ]
    assert first_final and first_final[0].values["transcript"] == out1["transcript"]


def test_metadata_belongs_to_its_episode(hotpot_store, hotpot_questions):
    """The oracle reads the episode's metadata: a later question does not inherit the earlier one's."""
    q = hotpot_questions[0]
    meta = {**q["metadata"], "golden_answers": q["golden_answers"]}
    other = {"golden_answers": ["nope"]}
    graph = build_graph("parallel", OraclePolicy(), hotpot_store, checkpointer=saver())
    cfg = {"configurable": {"thread_id": "t-meta"}}
    out1, out2, state, _ = asyncio.run(
        _two_runs(
            graph, cfg, {"question": q["question"], "metadata": meta}, {"question": Q2, "metadata": other}
        )
    )
    assert out1["answer"] == "yes" and out1["subqueries"] == 2
    # only a gold answer: the oracle has no supporting titles of its own and does not inherit the
    # first episode's, so it searches the question itself, and answers this episode's gold answer
    searched = [r["query"] for s in out2["trajectory"] if s["type"] == "observation" for r in s["results"]]
    assert searched[0] == Q2 and out2["answer"] == "nope"
    recs = state.values["history"]
    assert recs[0]["metadata"]["golden_answers"] == q["golden_answers"] and recs[1]["metadata"] == other
    assert state.values["metadata"] == {}  # the input was consumed by its episode


def test_an_episode_that_failed_is_recorded_as_abandoned(hotpot_store):
    class FailsOnce:
        name = "fails-once"

        def __init__(self):
            self.failed = False
            self.inner = ScriptedPolicy(PAR)

        async def agenerate(self, request):
            if not self.failed and request.turn_index == 1:
                self.failed = True
                raise RuntimeError("model server went away")
            return await self.inner.agenerate(request)

    graph = build_graph("parallel", FailsOnce(), hotpot_store, checkpointer=saver())
    cfg = {"configurable": {"thread_id": "t-fail"}}

    async def go():
        with pytest.raises(RuntimeError, match="went away"):
            await graph.ainvoke({"question": Q1}, cfg)
        out = await graph.ainvoke({"question": Q2}, cfg)
        return out, (await graph.aget_state(cfg)).values

    out, values = asyncio.run(go())
    assert out["answer"] == "yes" and out["policy_calls"] == 2 and f"Question: {Q1}" not in out["transcript"]
    assert f"User: {Q1}\nQuestion: {Q2}" in out["transcript"]  # asked, never answered: still said
    assert [(r["question"], r["status"]) for r in values["history"]] == [(Q1, "abandoned"), (Q2, "answered")]


def test_the_external_policy_resumes_within_its_episode(hotpot_store):
    """Command(resume=...) continues at the planner: no new episode, the RL environment's path."""
    from langgraph.types import Command

    from parallelsearch.agents.policies import ExternalPolicy

    graph = build_graph("parallel", ExternalPolicy(), hotpot_store, checkpointer=saver())
    cfg = {"configurable": {"thread_id": "t-ext"}}

    async def go():
        await graph.ainvoke({"question": Q1}, cfg)
        await graph.ainvoke(Command(resume=PAR[0]), cfg)
        return await graph.ainvoke(Command(resume=PAR[1]), cfg)

    out = asyncio.run(go())
    assert out["answer"] == "yes" and out["policy_calls"] == 2 and out["subqueries"] == 2
    values = asyncio.run(graph.aget_state(cfg)).values
    assert [r["status"] for r in values["history"]] == ["answered"]


def test_empty_question_is_refused_at_begin(hotpot_store):
    graph = build_graph("parallel", ScriptedPolicy(PAR), hotpot_store)
    with pytest.raises(ValueError, match="non-empty 'question'"):
        asyncio.run(graph.ainvoke({"question": "  "}))
    with pytest.raises(ValueError, match="'metadata' must be an object"):
        asyncio.run(graph.ainvoke({"question": Q1, "metadata": ["x"]}))
