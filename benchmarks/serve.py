"""LangServe app throughput: requests/s and p50/p95 latency at concurrency 1, 8 and 32,
scripted policy (instant), real embedded Chroma store, real HTTP on loopback.

``--guard``: what the request guard costs, the same app with and without it, alternating
rounds (figures in ``guard.json``; docs/performance.md, "Soak and the request guard").
"""

from __future__ import annotations

import asyncio
import json
import statistics
import time
import timeit

import httpx
from _common import alternating, fmt, gather_limited, hotpot_store, latency, parser, write
from tqdm import tqdm

from parallelsearch.agents.policies import ScriptedPolicy
from parallelsearch.serving.server import create_app
from parallelsearch.settings import Settings
from parallelsearch.stores.http.loopback import LoopbackServer

REQUESTS = 96
LEVELS = (1, 8, 32)
GUARD_ROUNDS, GUARD_PER_ROUND, GUARD_CONCURRENCY = 6, 48, 8


async def level(url: str, concurrency: int, questions: list[str]) -> dict:
    async with httpx.AsyncClient(timeout=120) as client:

        async def one(q: str) -> int:
            r = await client.post(url + "/parallelsearch/invoke", json={"input": {"question": q}})
            return r.status_code

        statuses, lat, wall = await gather_limited(one, questions, concurrency)
    return {
        "requests": len(questions),
        "errors": sum(s != 200 for s in statuses),
        "requests_per_s": round(len(questions) / wall, 2),
        **latency(lat, 2),
        "mean_ms": round(statistics.fmean(lat), 2),
        "latencies_ms": lat,
    }


def two_searches(recs: list[dict]) -> ScriptedPolicy:
    a, b = recs[0]["context"][0][0], recs[0]["context"][1][0]
    return ScriptedPolicy(
        [f"<think> t </think><search> {a} ## {b} </search>", "<think> t </think><answer> x </answer>"]
    )


def run() -> dict:
    store, recs = hotpot_store(40, name="servebench")
    # stateless requests, as the default app serves them (through the thread router, writing
    # nothing); "memory" keeps the benchmark from creating a thread database under the user's home
    settings = Settings(server_max_concurrency=256, server_checkpointer="memory")
    app = create_app(settings, policy=two_searches(recs), searcher=store)
    questions = [r["question"] for r in recs] * (REQUESTS // len(recs) + 1)
    results: dict = {"requests_per_level": REQUESTS, "levels": {}}
    with LoopbackServer(app) as srv:
        asyncio.run(level(srv.url, 4, questions[:8]))  # warm-up
        for c in tqdm(LEVELS, desc="serve benchmark"):
            row = asyncio.run(level(srv.url, c, questions[:REQUESTS]))
            del row["latencies_ms"]
            results["levels"][c] = row
            tqdm.write(
                f"concurrency {c:2d}: {row['requests_per_s']:6.2f} req/s, p50 {fmt(row['p50_ms'], '7.1f')} ms, p95 {fmt(row['p95_ms'], '7.1f')} ms, errors {row['errors']}"
            )
    return write("serve", results)


def guarded_and_bare(settings: Settings, policy, store) -> dict:
    """The same app twice: as served, and with the RequestGuard middleware taken out."""
    apps = {name: create_app(settings, policy=policy, searcher=store) for name in ("guarded", "bare")}
    apps["bare"].user_middleware = [
        m for m in apps["bare"].user_middleware if m.cls.__name__ != "RequestGuard"
    ]
    return apps


def in_process(apps: dict, rounds: int = 12, per_round: int = 40) -> dict:
    """ms per invoke through each app in-process (httpx's ASGI transport: no sockets, less noise)."""
    clients = {
        name: httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://in-process")
        for name, app in apps.items()
    }

    async def ms_per_invoke(client: httpx.AsyncClient) -> float:
        t0 = time.perf_counter()
        for j in range(per_round):
            r = await client.post("/parallelsearch/invoke", json={"input": {"question": f"q{j}?"}})
            r.raise_for_status()
        return (time.perf_counter() - t0) / per_round * 1000

    with asyncio.Runner() as runner:
        times = alternating(clients, range(rounds), lambda name, _: runner.run(ms_per_invoke(clients[name])))
        for c in clients.values():
            runner.run(c.aclose())
    return {name: round(statistics.median(ts[2:]), 2) for name, ts in times.items()}


def body_checks() -> dict:
    from parallelsearch.stores.http.asgi_guard import parse_json

    small = json.dumps({"input": {"question": "Were Scott Derrickson and Ed Wood of the same nationality?"}})
    big = json.dumps({"inputs": [{"question": "x" * 900} for _ in range(1000)]})
    out = {}
    for name, body in (("small_162B", small.encode()), ("batch_0.9MB", big.encode())):
        n = 2000 if len(body) < 1000 else 20
        out[name] = {
            "guard_us": round(timeit.timeit(lambda b=body: parse_json(b), number=n) / n * 1e6, 1),
            "json_loads_us": round(timeit.timeit(lambda b=body: json.loads(b), number=n) / n * 1e6, 1),
        }
    return out


def guard() -> dict:
    store, recs = hotpot_store(40, name="guardbench")
    settings = Settings(server_checkpointer="none")
    apps = guarded_and_bare(settings, two_searches(recs), store)
    questions = [r["question"] for r in recs][:GUARD_PER_ROUND]
    with LoopbackServer(apps["guarded"]) as g, LoopbackServer(apps["bare"]) as n:
        urls = {"guarded": g.url, "bare": n.url}
        for url in urls.values():
            asyncio.run(level(url, GUARD_CONCURRENCY, questions[:8]))  # warm-up
        rows = alternating(
            urls,
            tqdm(range(GUARD_ROUNDS), desc="guard benchmark"),
            lambda name, _: asyncio.run(level(urls[name], GUARD_CONCURRENCY, questions)),
        )
    result: dict = {
        name: {
            "requests_per_s_median": round(statistics.median(r["requests_per_s"] for r in rs), 2),
            "p50_ms": round(statistics.median(ms for r in rs for ms in r["latencies_ms"]), 1),
            "errors": sum(r["errors"] for r in rs),
        }
        for name, rs in rows.items()
    }
    result["throughput_ratio_guarded_over_bare"] = round(
        result["guarded"]["requests_per_s_median"] / result["bare"]["requests_per_s_median"], 3
    )
    answer_only = ScriptedPolicy(["<think> t </think><answer> x </answer>"])
    result["in_process_ms_per_invoke"] = in_process(guarded_and_bare(settings, answer_only, store))
    result["body_checks"] = body_checks()
    result.update(concurrency=GUARD_CONCURRENCY, rounds=GUARD_ROUNDS, per_round=GUARD_PER_ROUND)
    print(
        f"guarded {result['guarded']['requests_per_s_median']} req/s (p50 {result['guarded']['p50_ms']} ms), "
        f"bare {result['bare']['requests_per_s_median']} req/s (p50 {result['bare']['p50_ms']} ms): "
        f"ratio {result['throughput_ratio_guarded_over_bare']}; errors {result['guarded']['errors']} / {result['bare']['errors']}"
    )
    print(f"  in-process ms per answer-only invoke: {result['in_process_ms_per_invoke']}")
    for name, row in result["body_checks"].items():
        print(f"  body checks {name}: {row['guard_us']} us (json.loads alone {row['json_loads_us']} us)")
    return write("guard", result)


if __name__ == "__main__":
    ap = parser(__doc__)
    ap.add_argument("--guard", action="store_true", help="the request guard's cost (guard.json)")
    if ap.parse_args().guard:
        guard()
    else:
        run()
