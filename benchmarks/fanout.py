"""Search-stage wall time for k = 1, 2, 4, 8 sub-queries: parallel vs sequential graph,
against (a) a local store and (b) a /retrieve server with 50 ms injected latency.

Goal: k=4 <= 1.1x k=1 for the parallel graph on both backends. One direct ``search_batch`` of
the same k queries is the floor under the graph's ratio. All k and both graphs run interleaved
on one persistent event loop.
"""

from __future__ import annotations

import asyncio
import statistics
import time

from _common import hotpot_store, write

from parallelsearch.agents.policies import ScriptedPolicy
from parallelsearch.graphs import build_parallel_search_graph, build_sequential_graph
from parallelsearch.stores.http.loopback import LoopbackServer

REPEATS = 11
KS = (1, 2, 4, 8)


def wall_search_ms(graph, runner: asyncio.Runner) -> float:
    """Wall time of the search stage: total minus planner/join/answer node time."""
    t0 = time.perf_counter()
    out = runner.run(graph.ainvoke({"question": "benchmark question"}))
    total = (time.perf_counter() - t0) * 1000
    other = sum(v for k, v in out["node_ms"].items() if k != "search")
    return total - other


def delayed_retrieve_app(store, delay_s: float = 0.05):
    """The /retrieve app with ``delay_s`` added to every request (a remote retriever's latency)."""
    from fastapi import FastAPI

    from parallelsearch.stores import create_retrieval_app

    app = FastAPI()

    @app.middleware("http")
    async def delay(request, call_next):
        await asyncio.sleep(delay_s)
        return await call_next(request)

    app.mount("/", create_retrieval_app(store))
    return app


def measure(searcher, titles: list[str], runner: asyncio.Runner, direct=None) -> dict:
    graphs = {}
    for k in KS:
        par = ["<search> " + " ## ".join(titles[:k]) + " </search>", "<answer> x </answer>"]
        seq = [f"<search> {q} </search>" for q in titles[:k]] + ["<answer> x </answer>"]
        graphs[k] = (
            build_parallel_search_graph(ScriptedPolicy(par), searcher),
            build_sequential_graph(ScriptedPolicy(seq), searcher),
        )
    samples: dict[tuple[int, str], list[float]] = {}
    for rep in range(REPEATS + 1):  # round 0 is the warm-up
        for k, (pg, sg) in graphs.items():
            row = {"parallel": wall_search_ms(pg, runner), "sequential": wall_search_ms(sg, runner)}
            if direct is not None:
                t0 = time.perf_counter()
                direct(titles[:k])
                row["batched"] = (time.perf_counter() - t0) * 1000
            if rep:
                for name, v in row.items():
                    samples.setdefault((k, name), []).append(v)
    rows: dict = {}
    for (k, name), v in samples.items():
        rows.setdefault(k, {})[f"{name}_ms"] = round(statistics.median(v), 2)
    for name in ("parallel", "sequential", "batched"):
        if f"{name}_ms" in rows[1]:
            rows[f"ratio_k4_over_k1_{name}"] = round(rows[4][f"{name}_ms"] / rows[1][f"{name}_ms"], 3)
    return rows


def run() -> dict:
    store, recs = hotpot_store(40)
    titles = [t for r in recs for t, _ in r["context"]][:8]
    results: dict = {"repeats": REPEATS, "queries": titles, "backends": {}}
    with LoopbackServer(delayed_retrieve_app(store)) as srv, asyncio.Runner() as runner:
        backends = {
            "local_store": (store, store.search_batch),
            "retrieve_50ms": (f"{srv.url}/retrieve", None),
        }
        for backend, (searcher, direct) in backends.items():
            rows = measure(searcher, titles, runner, direct)
            for k in KS:
                r = rows[k]
                extra = f"   one search_batch {r['batched_ms']:7.1f} ms" if "batched_ms" in r else ""
                print(
                    f"{backend:14s} k={k}: parallel {r['parallel_ms']:7.1f} ms   "
                    f"sequential {r['sequential_ms']:7.1f} ms{extra}"
                )
            line = (
                f"{backend}: k=4/k=1 parallel {rows['ratio_k4_over_k1_parallel']}x (goal <= 1.1), "
                f"sequential {rows['ratio_k4_over_k1_sequential']}x"
            )
            if "ratio_k4_over_k1_batched" in rows:
                line += f", one batched encoder+Chroma call {rows['ratio_k4_over_k1_batched']}x (floor)"
            print(line)
            results["backends"][backend] = rows
    return write("fanout", results)


if __name__ == "__main__":
    run()
