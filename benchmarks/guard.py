"""What the request guard costs: the LangServe app with and without it, interleaved in one process.

The guard (parallelsearch/guard.py over stores/http/asgi_guard.py) reads, depth-checks, parses
and replays every body, checks the graph input and takes an admission slot. This runs the
same app twice on loopback, once with the guard and once with it removed (nothing else
differs), alternating rounds of invokes at concurrency 8, scripted policy (instant), real
embedded Chroma store; and times the body checks alone on a small and a 0.9 MB body.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import time
import timeit

import httpx
from _common import hotpot_store, write
from tqdm import tqdm

from parallelsearch.agents.policies import ScriptedPolicy
from parallelsearch.loopback import LoopbackServer
from parallelsearch.server import create_app
from parallelsearch.settings import Settings
from parallelsearch.stores.http.asgi_guard import parse_json

ROUNDS = 6
PER_ROUND = 48
CONCURRENCY = 8


async def round_trip(url: str, questions: list[str]) -> tuple[float, list[float]]:
    sem = asyncio.Semaphore(CONCURRENCY)
    lat: list[float] = []
    async with httpx.AsyncClient(timeout=120) as client:

        async def one(q: str) -> None:
            async with sem:
                t0 = time.perf_counter()
                r = await client.post(url + "/parallelsearch/invoke", json={"input": {"question": q}})
                r.raise_for_status()
                lat.append((time.perf_counter() - t0) * 1000)

        t0 = time.perf_counter()
        await asyncio.gather(*(one(q) for q in questions))
        return len(questions) / (time.perf_counter() - t0), lat


async def in_process(apps: dict, rounds: int = 12, per_round: int = 40) -> dict:
    """ms per invoke through each app in-process (httpx's ASGI transport: no sockets, less noise)."""
    times: dict[str, list[float]] = {name: [] for name in apps}
    clients = {
        name: httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://in-process")
        for name, app in apps.items()
    }
    for i in range(rounds):
        for name in list(apps) if i % 2 == 0 else list(apps)[::-1]:
            t0 = time.perf_counter()
            for j in range(per_round):
                r = await clients[name].post("/parallelsearch/invoke", json={"input": {"question": f"q{j}?"}})
                r.raise_for_status()
            times[name].append((time.perf_counter() - t0) / per_round * 1000)
    for c in clients.values():
        await c.aclose()
    return {name: round(statistics.median(ts[2:]), 2) for name, ts in times.items()}


def body_checks() -> dict:
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


def run() -> dict:
    store, recs = hotpot_store(40, name="guardbench")
    a, b = recs[0]["context"][0][0], recs[0]["context"][1][0]
    policy = ScriptedPolicy(
        [f"<think> t </think><search> {a} ## {b} </search>", "<think> t </think><answer> x </answer>"]
    )
    settings = Settings(server_checkpointer="none")
    guarded = create_app(settings, policy=policy, searcher=store)
    bare = create_app(settings, policy=policy, searcher=store)
    bare.user_middleware = [m for m in bare.user_middleware if m.cls.__name__ != "RequestGuard"]
    questions = [r["question"] for r in recs][:PER_ROUND]
    rows: dict[str, dict[str, list]] = {"guarded": {"rps": [], "lat": []}, "bare": {"rps": [], "lat": []}}
    with LoopbackServer(guarded) as g, LoopbackServer(bare) as n:
        urls = {"guarded": g.url, "bare": n.url}
        for url in urls.values():
            asyncio.run(round_trip(url, questions[:8]))  # warm-up
        for i in tqdm(range(ROUNDS), desc="guard benchmark"):
            for name in ("guarded", "bare") if i % 2 == 0 else ("bare", "guarded"):
                rps, lat = asyncio.run(round_trip(urls[name], questions))
                rows[name]["rps"].append(rps)
                rows[name]["lat"].extend(lat)
    result = {
        name: {
            "requests_per_s_median": round(statistics.median(r["rps"]), 2),
            "p50_ms": round(statistics.median(r["lat"]), 1),
        }
        for name, r in rows.items()
    }
    result["throughput_ratio_guarded_over_bare"] = round(
        result["guarded"]["requests_per_s_median"] / result["bare"]["requests_per_s_median"], 3
    )
    answer_only = ScriptedPolicy(["<think> t </think><answer> x </answer>"])
    apps = {"guarded": create_app(settings, policy=answer_only, searcher=store)}
    apps["bare"] = create_app(settings, policy=answer_only, searcher=store)
    apps["bare"].user_middleware = [
        m for m in apps["bare"].user_middleware if m.cls.__name__ != "RequestGuard"
    ]
    result["in_process_ms_per_invoke"] = asyncio.run(in_process(apps))
    result["body_checks"] = body_checks()
    result["concurrency"], result["rounds"], result["per_round"] = CONCURRENCY, ROUNDS, PER_ROUND
    print(
        f"guarded {result['guarded']['requests_per_s_median']} req/s (p50 {result['guarded']['p50_ms']} ms), "
        f"bare {result['bare']['requests_per_s_median']} req/s (p50 {result['bare']['p50_ms']} ms): "
        f"ratio {result['throughput_ratio_guarded_over_bare']}"
    )
    print(f"  in-process ms per answer-only invoke: {result['in_process_ms_per_invoke']}")
    for name, row in result["body_checks"].items():
        print(f"  body checks {name}: {row['guard_us']} us (json.loads alone {row['json_loads_us']} us)")
    write("guard", result)
    return result


if __name__ == "__main__":
    run()
