"""Search-stage wall time for k = 1, 2, 4, 8 sub-queries: parallel vs sequential graph,
against (a) a local store and (b) a /retrieve server with 50 ms injected latency.

Goal: k=4 <= 1.1x k=1 for the parallel graph on both backends.
"""

from __future__ import annotations

import asyncio
import statistics
import time

from _common import hotpot_store, write
from parallelsearch.agents.policies import ScriptedPolicy
from parallelsearch.graphs import build_parallel_search_graph, build_sequential_graph

REPEATS = 7


def scripts(queries: list[str]) -> tuple[list[str], list[str]]:
    par = ["<search> " + " ## ".join(queries) + " </search>", "<answer> x </answer>"]
    seq = [f"<search> {q} </search>" for q in queries] + ["<answer> x </answer>"]
    return par, seq


def wall_search_ms(graph) -> float:
    """Wall time of the search stage: total minus planner/join/answer node time."""
    t0 = time.perf_counter()
    out = asyncio.run(graph.ainvoke({"question": "benchmark question"}))
    total = (time.perf_counter() - t0) * 1000
    other = sum(v for k, v in out["node_ms"].items() if k != "search")
    return total - other


def run() -> dict:
    import threading

    import uvicorn
    from fastapi import FastAPI
    from parallelsearch.stores import create_retrieval_app

    store, recs = hotpot_store(40)
    titles = [t for r in recs for t, _ in r["context"]][:8]
    # /retrieve server with 50 ms injected latency per request
    inner = create_retrieval_app(store)
    app = FastAPI()

    @app.middleware("http")
    async def delay(request, call_next):
        await asyncio.sleep(0.05)
        return await call_next(request)

    app.mount("/", inner)
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    threading.Thread(target=server.run, daemon=True).start()
    while not server.started:
        time.sleep(0.05)
    url = f"http://127.0.0.1:{port}/retrieve"
    results: dict = {"repeats": REPEATS, "backends": {}}
    for backend, searcher in (("local_store", store), ("retrieve_50ms", url)):
        rows = {}
        for k in (1, 2, 4, 8):
            par, seq = scripts(titles[:k])
            pg = build_parallel_search_graph(ScriptedPolicy(par), searcher)
            sg = build_sequential_graph(ScriptedPolicy(seq), searcher)
            wall_search_ms(pg), wall_search_ms(sg)  # warm-up
            p = statistics.median(wall_search_ms(pg) for _ in range(REPEATS))
            s = statistics.median(wall_search_ms(sg) for _ in range(REPEATS))
            rows[k] = {"parallel_ms": round(p, 2), "sequential_ms": round(s, 2)}
            print(f"{backend:14s} k={k}: parallel {p:7.1f} ms   sequential {s:7.1f} ms")
        rows["ratio_k4_over_k1_parallel"] = round(rows[4]["parallel_ms"] / rows[1]["parallel_ms"], 3)
        rows["ratio_k4_over_k1_sequential"] = round(rows[4]["sequential_ms"] / rows[1]["sequential_ms"], 3)
        print(
            f"{backend}: k=4/k=1 parallel {rows['ratio_k4_over_k1_parallel']}x (goal <= 1.1), sequential {rows['ratio_k4_over_k1_sequential']}x"
        )
        results["backends"][backend] = rows
    server.should_exit = True
    write("fanout", results)
    return results


if __name__ == "__main__":
    run()
