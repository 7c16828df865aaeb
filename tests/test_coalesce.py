"""The batch coalescer: one batch_fn call per group of concurrent submits."""

from __future__ import annotations

import asyncio

from parallelsearch.agents.policies import ScriptedPolicy
from parallelsearch.graphs import build_parallel_search_graph
from parallelsearch.stores import Passage
from parallelsearch.stores.coalesce import BatchCoalescer, expect_batch

LONG_WINDOW_S = 30.0  # a batch that waited for this window would trip the 10 s guards below


def make() -> tuple[BatchCoalescer, list[list[str]]]:
    calls: list[list[str]] = []

    def batch_fn(key, items):
        calls.append(list(items))
        return [f"{key}:{i}" for i in items]

    return BatchCoalescer(batch_fn, window_s=LONG_WINDOW_S), calls


def test_expected_batch_goes_as_soon_as_it_is_complete():
    co, calls = make()

    async def run():
        with expect_batch(3):
            return await asyncio.wait_for(asyncio.gather(*(co.submit("k", q) for q in "abc")), 10)

    assert asyncio.run(run()) == ["k:a", "k:b", "k:c"]
    assert calls == [["a", "b", "c"]] and co.batches == 1


def test_without_a_hint_the_window_closes_the_batch():
    calls: list[list[str]] = []
    co = BatchCoalescer(lambda key, items: calls.append(list(items)) or list(items), window_s=0.01)

    async def run():
        first = await asyncio.gather(*(co.submit("k", q) for q in "ab"))
        with expect_batch(5):  # fewer than expected arrive: the window still ends the batch
            second = await asyncio.gather(*(co.submit("k", q) for q in "cd"))
        return first, second

    assert asyncio.run(run()) == (["a", "b"], ["c", "d"])
    assert calls == [["a", "b"], ["c", "d"]]


def test_keys_batch_separately_and_failures_reach_every_caller():
    def batch_fn(key, items):
        if key == "bad":
            raise ValueError("broken backend")
        return list(items)

    co = BatchCoalescer(batch_fn, window_s=LONG_WINDOW_S)

    async def run():
        with expect_batch(2):
            good = asyncio.gather(co.submit("good", "x"), co.submit("good", "y"))
            bad = asyncio.gather(co.submit("bad", "x"), co.submit("bad", "y"), return_exceptions=True)
            return await asyncio.wait_for(asyncio.gather(good, bad), 10)

    good, bad = asyncio.run(run())
    assert good == ["x", "y"]
    assert all(isinstance(e, ValueError) and "broken backend" in str(e) for e in bad)


class CoalescingSearcher:
    """An honest stand-in for a store: coalesces like ChromaStore, with a window too long to wait for."""

    name = "coalescing"

    def __init__(self) -> None:
        self.co = BatchCoalescer(self._batch, window_s=LONG_WINDOW_S)
        self.batches: list[list[str]] = []

    def _batch(self, k, queries):
        self.batches.append(list(queries))
        return [[Passage(q, q, f"text about {q}", 1.0, self.name)] for q in queries]

    async def asearch(self, query, k=3):
        return await self.co.submit(k, query)


def test_the_graph_tells_the_searcher_how_many_searches_a_round_has():
    searcher = CoalescingSearcher()
    turns = ["<search> A ## B ## C </search>", "<search> D </search>", "<answer> x </answer>"]
    graph = build_parallel_search_graph(ScriptedPolicy(turns), searcher, search_timeout_s=20)
    out = asyncio.run(asyncio.wait_for(graph.ainvoke({"question": "q"}), 15))
    assert out["answer"] == "x" and out["errors"] == 0
    assert searcher.batches == [["A", "B", "C"], ["D"]]
