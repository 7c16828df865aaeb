"""Graph overhead per policy turn with an instant policy and an instant searcher (goal <= 2 ms)."""

from __future__ import annotations

import asyncio
import time

from _common import write
from parallelsearch.agents.policies import ScriptedPolicy
from parallelsearch.graphs import build_parallel_search_graph
from parallelsearch.stores import Passage


class Instant:
    async def asearch(self, query, k=3):
        return [Passage(query, query, "text", 1.0, "instant")]


def main() -> dict:
    turns = [
        "<search> a ## b </search>",
        "<search> c ## d </search>",
        "<search> e </search>",
        "<answer> x </answer>",
    ]
    g = build_parallel_search_graph(ScriptedPolicy(turns), Instant())
    n = 200

    async def go():
        for _ in range(n):
            await g.ainvoke({"question": "q"})

    asyncio.run(go())  # warm-up
    t0 = time.perf_counter()
    asyncio.run(go())
    per_episode = (time.perf_counter() - t0) * 1000 / n
    per_turn = per_episode / len(turns)
    print(
        f"episode {per_episode:.2f} ms, {len(turns)} policy turns + 3 search rounds: {per_turn:.2f} ms per policy turn (goal <= 2 ms)"
    )
    return write(
        "overhead",
        {"episodes": n, "ms_per_episode": round(per_episode, 3), "ms_per_policy_turn": round(per_turn, 3)},
    )


if __name__ == "__main__":
    main()
