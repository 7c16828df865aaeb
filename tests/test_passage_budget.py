"""The observation budget: ``passage_budget`` shares a total number of passages among a search's
sub-queries (``min(top_k, max(1, budget // k))`` each), through the real graph, a real Chroma store
and the MiniLM encoder; off by default, so today's observations do not move."""

from __future__ import annotations

import asyncio

import pytest
from conftest import needs_data

from parallelsearch.graphs import GraphConfig

EIGHT = [
    "Doctor Strange",
    "Scott Derrickson",
    "Ed Wood",
    "Tim Burton",
    "Laleli Mosque",
    "Esma Sultan Mansion",
    "Big Stone Gap",
    "Greenwich Village",
]
WIDE_SEARCH = ["<search> " + " ## ".join(EIGHT) + " </search>", "<answer> x </answer>"]


@pytest.mark.parametrize(
    ("budget", "top_k", "k", "expected"),
    [
        (None, 3, 32, 3),  # off: top_k whatever the width
        (12, 3, 1, 3),  # never more than top_k
        (12, 3, 4, 3),
        (12, 3, 6, 2),
        (12, 3, 32, 1),  # at least one passage each, even past the budget
        (64, 5, 8, 5),
        (7, 5, 2, 3),
    ],
)
def test_search_top_k_shares_the_budget(budget, top_k, k, expected):
    assert GraphConfig(top_k=top_k, passage_budget=budget).search_top_k(k) == expected


def test_a_budget_below_one_is_refused_by_name():
    with pytest.raises(ValueError, match="passage_budget"):
        GraphConfig(passage_budget=0)


def _run(store, turns, context=None, **options):
    from parallelsearch.agents.policies import ScriptedPolicy
    from parallelsearch.graphs import build_parallel_search_graph

    graph = build_parallel_search_graph(ScriptedPolicy(turns), store, max_subqueries=8, **options)
    return asyncio.run(graph.ainvoke({"question": "which?"}, context=context))


def _rows(out) -> list[dict]:
    """The search's result rows, in sub-query order, as the trajectory records them."""
    return next(t["results"] for t in out["trajectory"] if t["type"] == "observation")


def _per_subquery(out) -> list[int]:
    return [len(r["passages"]) for r in _rows(out)]


def _observation(out) -> str:
    return next(t["text"] for t in out["trajectory"] if t["type"] == "observation")


@needs_data
def test_a_wide_search_fetches_the_budgeted_passages_and_the_default_is_unchanged(hotpot_store):
    off = _run(hotpot_store, WIDE_SEARCH)
    assert _per_subquery(off) == [3] * 8
    budgeted = _run(hotpot_store, WIDE_SEARCH, passage_budget=8)
    assert _per_subquery(budgeted) == [1] * 8
    assert _observation(budgeted).count("Doc ") == 8
    # each sub-query keeps its own best passage: the budget cuts the tail, never reorders
    assert [r["passages"][0]["id"] for r in _rows(budgeted)] == [r["passages"][0]["id"] for r in _rows(off)]
    # a budget the search fits in changes nothing, byte for byte
    roomy = _run(hotpot_store, WIDE_SEARCH, passage_budget=24)
    assert _observation(roomy) == _observation(off)
    assert off["passages"] == 24 and budgeted["passages"] == 8


@needs_data
def test_the_budget_is_a_per_request_knob(hotpot_store):
    out = _run(hotpot_store, WIDE_SEARCH, context={"passage_budget": 16})
    assert _per_subquery(out) == [2] * 8
    with pytest.raises(ValueError, match="passage_budget"):
        _run(hotpot_store, WIDE_SEARCH, context={"passage_budget": 0})


@needs_data
def test_dependent_subqueries_share_the_budget_of_the_whole_search(hotpot_store):
    turns = [
        "<search> Doctor Strange director ## #1 nationality ## Ed Wood </search>",
        "<answer> x </answer>",
    ]
    out = _run(hotpot_store, turns, passage_budget=3, resolver=lambda q, parents: q.replace("#1", "Scott"))
    assert out["search_rounds"] == 2  # two stages, one turn
    assert _per_subquery(out) == [1, 1, 1]
