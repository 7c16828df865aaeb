"""Environment throughput: episodes/s and steps/s with a scripted policy at 1, 8 and 32
concurrent episodes, against an embedded store, a Chroma server and the /retrieve server.

Each episode: one split search (2 sub-queries), one single search, then an answer
(3 steps, 3 sub-queries). The policy is instant, so this measures the environment:
graph + checkpointer + searcher.
"""

from __future__ import annotations

import asyncio

from _common import HOTPOT, gather_limited, hotpot_store, write
from _server import ChromaServer
from tqdm import tqdm

from parallelsearch.agents.policies import ScriptedPolicy
from parallelsearch.rl import EnvGraph
from parallelsearch.rl.rollout import rollout_episode
from parallelsearch.stores.http.loopback import LoopbackServer

EPISODES = 64
LEVELS = (1, 8, 32)


def questions(n: int, first: int) -> list[dict]:
    """``n`` episodes' questions drawn in turn from the first HotpotQA questions (ids made unique)."""
    from parallelsearch.data import load_questions

    qs = load_questions(HOTPOT)[:first]
    return [{**qs[i % first], "id": f"{qs[i % first]['id']}-{i}"} for i in range(n)]


def policy_for(recs: list[dict]) -> ScriptedPolicy:
    a, b = recs[0]["context"][0][0], recs[0]["context"][1][0]
    return ScriptedPolicy(
        [
            f"<think> t </think><search> {a} ## {b} </search>",
            f"<think> t </think><search> {a} </search>",
            "<think> t </think><answer> x </answer>",
        ]
    )


async def measure(env_graph: EnvGraph, policy, qs: list[dict], concurrency: int) -> dict:
    recs, _, wall = await gather_limited(lambda q: rollout_episode(env_graph, policy, q), qs, concurrency)
    return {
        "episodes": len(recs),
        "failures": sum(1 for r in recs if r.get("error")),
        "episodes_per_s": round(len(recs) / wall, 2),
        "steps_per_s": round(sum(len(r["turns"]) for r in recs) / wall, 2),
        "wall_s": round(wall, 3),
    }


def run() -> dict:
    from parallelsearch.stores import create_retrieval_app

    store, recs = hotpot_store(40, name="envbench")
    qs = questions(EPISODES, len(recs))
    policy = policy_for(recs)
    results: dict = {"episodes_per_level": EPISODES, "backends": {}}
    with ChromaServer() as chroma, LoopbackServer(create_retrieval_app(store)) as retrieve:
        backends = {
            "embedded_store": store,
            "chroma_server": chroma.copy_store(store),
            "retrieve_server": retrieve.url + "/retrieve",
        }
        bar = tqdm(total=len(backends) * len(LEVELS), desc="env benchmark")
        for name, searcher in backends.items():
            g = EnvGraph(searcher)
            asyncio.run(measure(g, policy, qs[:4], 4))  # warm-up
            rows = {}
            for c in LEVELS:
                rows[c] = asyncio.run(measure(g, policy, qs, c))
                print(
                    f"{name:16s} concurrency {c:2d}: {rows[c]['episodes_per_s']:7.2f} episodes/s, {rows[c]['steps_per_s']:7.2f} steps/s, failures {rows[c]['failures']}"
                )
                bar.update(1)
            rows["speedup_32_over_1"] = round(rows[32]["episodes_per_s"] / rows[1]["episodes_per_s"], 2)
            results["backends"][name] = rows
        bar.close()
    return write("env", results)


if __name__ == "__main__":
    run()
