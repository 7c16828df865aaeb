"""Overhead per turn of the chat agent on a growing thread, side by side with LangChain's
``create_agent`` (goal <= 1.15x): the same instant STAND-IN chat model (two parallel search calls,
then the answer, every turn) and the same instant tool, each agent on its own thread of a
checkpointer, turn r of both run one after the other (in alternating order), so a slow patch of a
shared machine hits both alike. What is left is what each graph costs per turn as the thread grows.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import statistics
import time
from typing import Any

from _common import alternating, parser, write
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langgraph.checkpoint.memory import InMemorySaver

from parallelsearch import create_parallel_search_agent

_IDS = itertools.count()


class InstantChat(BaseChatModel):
    """A STAND-IN chat model: two parallel ``search`` calls after a question, then the answer."""

    @property
    def _llm_type(self) -> str:
        return "instant-stand-in"

    def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
        return self.bind(**kwargs)

    def _generate(
        self, messages: list, stop: Any = None, run_manager: Any = None, **kwargs: Any
    ) -> ChatResult:
        if isinstance(messages[-1], HumanMessage):
            calls = [
                {"name": "search", "args": {"query": q}, "id": f"call_{next(_IDS)}", "type": "tool_call"}
                for q in ("Inception director", "Inception release")
            ]
            msg = AIMessage(content="", tool_calls=calls)
        else:
            msg = AIMessage(content="Christopher Nolan, in 2010.")
        return ChatResult(generations=[ChatGeneration(message=msg)])

    async def _agenerate(
        self, messages: list, stop: Any = None, run_manager: Any = None, **kwargs: Any
    ) -> ChatResult:
        return self._generate(messages, stop, **kwargs)


def search(query: str) -> str:
    """Search the encyclopedia for one query."""
    return f"What the wiki says about {query}."


def agents() -> dict[str, Any]:
    from langchain.agents import create_agent

    return {
        "parallelsearch": create_parallel_search_agent(InstantChat(), search, checkpointer=InMemorySaver()),
        "create_agent": create_agent(InstantChat(), [search], checkpointer=InMemorySaver()),
    }


def main() -> dict:
    p = parser(__doc__)
    p.add_argument("--threads", type=int, default=4, help="threads per agent")
    p.add_argument(
        "--turns", type=int, default=40, help="questions per thread (the thread grows by 4 messages each)"
    )
    args = p.parse_args()
    graphs = agents()
    load_before = os.getloadavg()

    with asyncio.Runner() as runner:

        def turn(name: str, r: int) -> tuple[float, float]:
            thread, n = divmod(r, args.turns)
            config = {"configurable": {"thread_id": f"{name}-{thread}"}}
            t0, c0 = time.perf_counter(), time.process_time()
            runner.run(graphs[name].ainvoke({"messages": [("user", f"question {n}?")]}, config))
            return (time.perf_counter() - t0) * 1000, (time.process_time() - c0) * 1000

        for name in graphs:  # warm-up: imports, first compilation paths
            turn(name, 0)
        graphs = agents()
        ms = alternating(list(graphs), range(args.threads * args.turns), turn)
    return report(ms, args, load_before)


def report(ms: dict[str, list[tuple[float, float]]], args: Any, load_before: tuple[float, ...]) -> dict:
    """Per-turn CPU and wall time (medians; the CPU time of this process resists a loaded
    machine, the wall time does not), the late half of each thread apart, and the ratios."""
    late = args.turns // 2
    rows = {}
    for name, pairs in ms.items():
        cpu = [c for _, c in pairs]
        late_cpu = [cpu[t * args.turns + i] for t in range(args.threads) for i in range(late, args.turns)]
        rows[name] = {
            "cpu_ms_per_turn": round(statistics.median(cpu), 3),
            "cpu_ms_mean": round(statistics.fmean(cpu), 3),
            "cpu_ms_late_turns": round(statistics.median(late_cpu), 3),
            "wall_ms_per_turn": round(statistics.median(w for w, _ in pairs), 3),
        }
    ours, theirs = rows["parallelsearch"], rows["create_agent"]
    ratio = {k: round(ours[k] / theirs[k], 3) for k in ours}
    load = (load_before, os.getloadavg())
    print(
        f"{args.threads} threads x {args.turns} turns each, alternating; load average {load[0][0]:.1f} -> {load[1][0]:.1f}"
    )
    for name, row in rows.items():
        print(f"  {name:15s} " + ", ".join(f"{k} {v:.2f}" for k, v in row.items()))
    print("  ratio (parallelsearch / create_agent): " + ", ".join(f"{k} {v:.3f}" for k, v in ratio.items()))
    return write(
        "chat_overhead",
        {"threads": args.threads, "turns": args.turns, "ms": rows, "ratio": ratio,
         "load_average_before": load[0], "load_average_after": load[1], "cpus": os.cpu_count()},
    )  # fmt: skip


if __name__ == "__main__":
    main()
