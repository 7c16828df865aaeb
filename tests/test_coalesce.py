"""The batch coalescer: one batch_fn call per group of concurrent submits."""

from __future__ import annotations

import asyncio

from parallelsearch.agents.policies import ScriptedPolicy
from parallelsearch.graphs import build_parallel_search_graph
from parallelsearch.stores import Passage
from parallelsearch.stores.coalesce import BatchCoalescer

LONG_WINDOW_S = 30.0  # a batch that waited for this window would trip the 10 s guard below


def test_a_full_batch_goes_without_waiting_for_the_window():
    calls: list[list[str]] = []
    co = BatchCoalescer(
        lambda key, items: calls.append(list(items)) or list(items), LONG_WINDOW_S, max_batch=3
    )

    async def run():
        return await asyncio.wait_for(asyncio.gather(*(co.submit("k", q) for q in "abc")), 10)

    assert asyncio.run(run()) == ["a", "b", "c"]
    assert calls == [["a", "b", "c"]] and co.batches == 1


def test_the_window_closes_each_batch():
    calls: list[list[str]] = []
    co = BatchCoalescer(lambda key, items: calls.append(list(items)) or list(items), window_s=0.01)

    async def run():
        first = await asyncio.gather(*(co.submit("k", q) for q in "ab"))
        second = await asyncio.gather(*(co.submit("k", q) for q in "cd"))
        return first, second

    assert asyncio.run(run()) == (["a", "b"], ["c", "d"])
    assert calls == [["a", "b"], ["c", "d"]]


def test_keys_batch_separately_and_failures_reach_every_caller():
    def batch_fn(key, items):
        if key == "bad":
            raise ValueError("broken backend")
        return list(items)

    co = BatchCoalescer(batch_fn, window_s=0.05)

    async def run():
        good = asyncio.gather(co.submit("good", "x"), co.submit("good", "y"))
        bad = asyncio.gather(co.submit("bad", "x"), co.submit("bad", "y"), return_exceptions=True)
        return await asyncio.wait_for(asyncio.gather(good, bad), 10)

    good, bad = asyncio.run(run())
    assert good == ["x", "y"]
    assert all(isinstance(e, ValueError) and "broken backend" in str(e) for e in bad)


class CoalescingSearcher:
    """An honest stand-in for a store's search: coalesces like ChromaStore, records each batch."""

    name = "coalescing"

    def __init__(self, window_s: float) -> None:
        self.co = BatchCoalescer(self._batch, window_s=window_s)
        self.batches: list[list[str]] = []

    def _batch(self, k, queries):
        self.batches.append(sorted(queries))
        return [[Passage(q, q, f"text about {q}", 1.0, self.name)] for q in queries]

    async def asearch(self, query, k=3):
        return await self.co.submit(k, query)


def test_concurrent_episodes_share_one_encoder_batch():
    """The window merges searches across episodes: that is the environment's throughput."""
    searcher = CoalescingSearcher(window_s=0.5)
    graphs = [
        build_parallel_search_graph(
            ScriptedPolicy([f"<search> {a} ## {b} </search>", "<answer> x </answer>"]), searcher
        )
        for a, b in (("A", "B"), ("C", "D"))
    ]

    async def run():
        return await asyncio.wait_for(asyncio.gather(*(g.ainvoke({"question": "q"}) for g in graphs)), 20)

    outs = asyncio.run(run())
    assert [o["subqueries"] for o in outs] == [2, 2] and all(o["errors"] == 0 for o in outs)
    assert searcher.batches == [["A", "B", "C", "D"]]
