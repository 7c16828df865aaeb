"""What the searcher adapters cost per sub-query, side by side, interleaved in one process.

1. Instant searchers: an object's ``asearch`` as it is, the same object through the wrapper,
   async and sync functions: the differences are the adapters' own cost.
2. A real store of the shipped HotpotQA sample, rounds of 2 concurrent sub-queries:
   ``StoreSearcher`` (one coalesced encoder call) against a sync function over ``store.search``.
"""

from __future__ import annotations

import asyncio
import json

from _common import InstantSearcher, interleaved_ms, records_store, rounded, write

from parallelsearch.agents.searchers import FunctionSearcher, ObjectSearcher, StoreSearcher, guarded_search
from parallelsearch.demo_data import HOTPOTQA_SAMPLE
from parallelsearch.stores import Passage, get_embedder

CALLS_PER_BLOCK = 2000
BLOCKS = 10
ROUNDS_PER_BLOCK = 20
STORE_BLOCKS = 6
QUERIES = ["Greyia", "Calibanus", "John Updike", "Tom Clancy", "Moscow State University", "Halina Reijn"]


async def instant_async(query, k):
    return [Passage(query, query, "text", 1.0, "instant")]


def instant_sync(query, k):
    return [Passage(query, query, "text", 1.0, "instant")]


def instant_dicts(query, k):
    return [{"title": query, "text": "text", "score": 1.0}]


async def searches(searcher, n: int) -> None:
    for i in range(n):
        await guarded_search(searcher, QUERIES[i % len(QUERIES)], 3)


async def rounds_of_two(searcher, n: int) -> None:
    for i in range(n):
        a, b = QUERIES[(2 * i) % len(QUERIES)], QUERIES[(2 * i + 1) % len(QUERIES)]
        await asyncio.gather(guarded_search(searcher, a, 3), guarded_search(searcher, b, 3))


def interleaved(runner, fns: dict, loop, n: int, blocks: int) -> dict[str, float]:
    """Median ms per iteration of ``loop(searcher, n)`` for each searcher, blocks interleaved."""
    ms = interleaved_ms({name: lambda s=s: runner.run(loop(s, n)) for name, s in fns.items()}, blocks)
    return {name: v / n for name, v in ms.items()}


def main() -> dict:
    instant = {
        "object_unwrapped": InstantSearcher(),
        "object_wrapped": ObjectSearcher(InstantSearcher()),
        "async_function": FunctionSearcher(instant_async),
        "sync_function_thread": FunctionSearcher(instant_sync),
        "sync_function_dicts": FunctionSearcher(instant_dicts),
    }
    recs = [json.loads(line) for line in HOTPOTQA_SAMPLE.read_text(encoding="utf-8").splitlines()[:30]]
    store, _ = records_store(recs, "adapters", embedder=get_embedder())
    real = {
        "StoreSearcher": StoreSearcher(store),
        "sync_function_store_search": FunctionSearcher(lambda q, k: store.search(q, k), name="store.search"),
    }
    with asyncio.Runner() as runner:
        us = {k: v * 1000 for k, v in interleaved(runner, instant, searches, CALLS_PER_BLOCK, BLOCKS).items()}
        before = store.embedder.calls
        ms = interleaved(runner, real, rounds_of_two, ROUNDS_PER_BLOCK, STORE_BLOCKS)
    base = us["object_unwrapped"]
    for name, v in us.items():
        print(f"{name:>24}: {v:7.1f} us per guarded search ({v - base:+.1f} us vs the object as it is)")
    ratio = ms["sync_function_store_search"] / ms["StoreSearcher"]
    print(
        f"real store, rounds of 2 concurrent sub-queries: StoreSearcher {ms['StoreSearcher']:.2f} ms, "
        f"a sync function over store.search {ms['sync_function_store_search']:.2f} ms ({ratio:.2f}x)"
    )
    return write(
        "searcher_adapters",
        {
            "instant_us_per_search": rounded(us, 2),
            "store_ms_per_round_of_2": rounded(ms, 3),
            "function_over_store_ratio": round(ratio, 3),
            "encoder_calls_during_store_rounds": store.embedder.calls - before,
            "calls_per_block": CALLS_PER_BLOCK,
            "blocks": BLOCKS,
            "rounds_per_block": ROUNDS_PER_BLOCK,
            "store_blocks": STORE_BLOCKS,
        },
    )


if __name__ == "__main__":
    main()
