"""Graph overhead per policy turn with an instant policy and an instant searcher (goal <= 2 ms).

Side by side, interleaved in the same process: a bare LangGraph graph with the same
topology and the same number of supersteps (begin -> planner -> Send x k -> join ->
planner ... -> answer) whose nodes do nothing. Its time is what LangGraph itself costs on this
machine; ours minus it is what parallelsearch adds per turn (parsing, prompt and
observation formatting, state, counts, timings, the trajectory).
"""

from __future__ import annotations

import asyncio
import operator
from typing import Annotated

from _common import InstantSearcher, interleaved_ms, write
from langgraph.graph import END, START, StateGraph
from langgraph.types import Send
from typing_extensions import TypedDict

from parallelsearch.agents.policies import ScriptedPolicy
from parallelsearch.graphs import build_parallel_search_graph

TURNS = [
    "<search> a ## b </search>",
    "<search> c ## d </search>",
    "<search> e </search>",
    "<answer> x </answer>",
]
EPISODES_PER_BLOCK = 25
BLOCKS = 12


class BareState(TypedDict, total=False):
    question: str
    turn: int
    results: Annotated[list, operator.add]


def bare_langgraph():
    """Same topology and supersteps as the ParallelSearch graph for TURNS; nodes do nothing."""
    plan = [["a", "b"], ["c", "d"], ["e"], None]

    async def planner(s):
        return {"turn": s.get("turn", 0) + 1}

    def route(s):
        subqueries = plan[s["turn"] - 1]
        return "answer" if subqueries is None else [Send("search", {"q": q}) for q in subqueries]

    async def search(task):
        return {"results": [task["q"]]}

    async def nothing(s):
        return {}

    async def begin(s):
        return {"turn": 0}

    b = StateGraph(BareState)
    nodes = {"begin": begin, "planner": planner, "search": search, "join": nothing, "answer": nothing}
    for name, fn in nodes.items():
        b.add_node(name, fn)
    b.add_edge(START, "begin")
    b.add_edge("begin", "planner")
    b.add_conditional_edges("planner", route, ["search", "answer"])
    b.add_edge("search", "join")
    b.add_edge("join", "planner")
    b.add_edge("answer", END)
    return b.compile()


def main() -> dict:
    graphs = {
        "parallelsearch": build_parallel_search_graph(ScriptedPolicy(TURNS), InstantSearcher()),
        "bare_langgraph": bare_langgraph(),
    }

    async def block(g, n):
        for _ in range(n):
            await g.ainvoke({"question": "q"})

    with asyncio.Runner() as runner:
        block_ms = interleaved_ms(
            {name: lambda g=g: runner.run(block(g, EPISODES_PER_BLOCK)) for name, g in graphs.items()}, BLOCKS
        )
    ours, bare = (block_ms[name] / EPISODES_PER_BLOCK / len(TURNS) for name in graphs)
    print(
        f"{len(TURNS)} policy turns + 3 search rounds per episode: {ours:.2f} ms per policy turn (goal <= 2 ms); "
        f"bare LangGraph, same supersteps: {bare:.2f} ms; parallelsearch adds {ours - bare:.2f} ms per turn"
    )
    return write(
        "overhead",
        {
            "episodes": EPISODES_PER_BLOCK * BLOCKS,
            "ms_per_policy_turn": round(ours, 3),
            "ms_per_episode": round(ours * len(TURNS), 3),
            "bare_langgraph_ms_per_policy_turn": round(bare, 3),
            "added_ms_per_policy_turn": round(ours - bare, 3),
        },
    )


if __name__ == "__main__":
    main()
