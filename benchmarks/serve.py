"""LangServe app throughput: requests/s and p50/p95 latency at concurrency 1, 8 and 32,
scripted policy (instant), real embedded Chroma store, real HTTP on loopback.
"""

from __future__ import annotations

import asyncio
import statistics
import time

import httpx
from _common import fmt, hotpot_store, percentile, write
from tqdm import tqdm

from parallelsearch.agents.policies import ScriptedPolicy
from parallelsearch.loopback import LoopbackServer
from parallelsearch.server import create_app
from parallelsearch.settings import Settings

REQUESTS = 96
LEVELS = (1, 8, 32)


async def level(url: str, concurrency: int, questions: list[str]) -> dict:
    sem = asyncio.Semaphore(concurrency)
    lat: list[float] = []
    errors = 0
    async with httpx.AsyncClient(timeout=120) as client:

        async def one(q: str) -> None:
            nonlocal errors
            async with sem:
                t0 = time.perf_counter()
                r = await client.post(url + "/parallelsearch/invoke", json={"input": {"question": q}})
                lat.append((time.perf_counter() - t0) * 1000)
                errors += r.status_code != 200

        t0 = time.perf_counter()
        await asyncio.gather(*(one(q) for q in questions))
        wall = time.perf_counter() - t0
    return {
        "requests": len(questions),
        "errors": errors,
        "requests_per_s": round(len(questions) / wall, 2),
        "p50_ms": percentile(lat, 0.5, 2),
        "p95_ms": percentile(lat, 0.95, 2),
        "mean_ms": round(statistics.fmean(lat), 2),
    }


def run() -> dict:
    store, recs = hotpot_store(40, name="servebench")
    a, b = recs[0]["context"][0][0], recs[0]["context"][1][0]
    policy = ScriptedPolicy(
        [f"<think> t </think><search> {a} ## {b} </search>", "<think> t </think><answer> x </answer>"]
    )
    # stateless requests, as the default app serves them (through the thread router, writing
    # nothing); "memory" keeps the benchmark from creating a thread database under the user's home
    settings = Settings(server_max_concurrency=256, server_checkpointer="memory")
    app = create_app(settings, policy=policy, searcher=store)
    questions = [r["question"] for r in recs] * (REQUESTS // len(recs) + 1)
    results: dict = {"requests_per_level": REQUESTS, "levels": {}}
    with LoopbackServer(app) as srv:
        asyncio.run(level(srv.url, 4, questions[:8]))  # warm-up
        for c in tqdm(LEVELS, desc="serve benchmark"):
            row = asyncio.run(level(srv.url, c, questions[:REQUESTS]))
            results["levels"][c] = row
            tqdm.write(
                f"concurrency {c:2d}: {row['requests_per_s']:6.2f} req/s, p50 {fmt(row['p50_ms'], '7.1f')} ms, p95 {fmt(row['p95_ms'], '7.1f')} ms, errors {row['errors']}"
            )
    write("serve", results)
    return results


if __name__ == "__main__":
    run()
