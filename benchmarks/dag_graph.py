"""Dependent sub-queries in one turn against one query per turn: the oracle on MuSiQue.

Goal: with the oracle, the ``dag`` plan (every hop in one search, dependent hops naming earlier
ones by ``#k``, resolved by the graph stage by stage) takes <= 0.62x the policy calls of the
sequential graph (one hop per turn) and <= 0.7x its latency at a simulated 200 ms per policy
turn. Data: MuSiQue (AdelWang_MIGRES, 200 questions: 2hop, 3hop1, 4hop1 chains and branching
3hop2/4hop2/4hop3), never the holdout. Store: the union of the file's context paragraphs in a
real embedded Chroma store with the MiniLM encoder.

One evaluation per resolver (``passage``: no model call; ``gold``: the gold intermediate
answers, the upper bound), each running the ``parallel`` graph with ``oracle:dag`` and the
``sequential`` graph (where the same oracle searches hop by hop) on every question, the two
graphs interleaved question by question so both see the same machine. Prints per question type
the policy calls, search rounds (stages), resolver calls, gold-paragraph recall and latency,
and the dag/sequential ratios; writes benchmarks/results/dag_graph.json.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from collections import defaultdict
from pathlib import Path

from _common import RAW, percentile, write

from parallelsearch.agents.policies import OraclePolicy
from parallelsearch.data import load_questions
from parallelsearch.eval import evaluate
from parallelsearch.eval.runner import read_results
from parallelsearch.graphs import GraphConfig
from parallelsearch.stores import ChromaStore, ingest

MUSIQUE = RAW / "musique" / "AdelWang_MIGRES" / "musique.json"
TURN_MS = 200.0
FIELDS = ("policy_calls", "search_rounds", "resolver_calls", "gold_recall")


def _mean(xs: list[float | None]) -> float | None:
    vals = [float(x) for x in xs if x is not None]
    return round(sum(vals) / len(vals), 4) if vals else None


def _figures(rows: list[dict]) -> dict:
    ok = [r for r in rows if not r.get("error")]
    out = {f: _mean([r.get(f) for r in ok]) for f in FIELDS}
    lat = [r["latency_ms"] for r in ok]
    out.update(
        n=len(ok), failed=len(rows) - len(ok), p50_ms=percentile(lat, 0.5, 1), p95_ms=percentile(lat, 0.95, 1)
    )
    return out


def _ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 4) if a is not None and b else None


def run(limit: int | None, concurrency: int, turn_ms: float) -> dict:
    tmp = Path(tempfile.mkdtemp())
    store = ChromaStore("dag-graph-musique", path=tmp / "db")
    t0 = time.perf_counter()
    ingest(store, [MUSIQUE], progress=True)
    print(f"{store.count()} paragraphs encoded in {time.perf_counter() - t0:.0f} s")
    questions = load_questions(MUSIQUE, dataset="musique")[:limit]
    results: dict = {
        "questions": len(questions),
        "turn_ms": turn_ms,
        "concurrency": concurrency,
        "resolvers": {},
    }
    for resolver in ("passage", "gold"):
        out = tmp / resolver
        asyncio.run(
            evaluate(
                questions,
                ["parallel", "sequential"],
                OraclePolicy(dag=True),
                store,
                out,
                policy_spec="oracle:dag",
                concurrency=concurrency,
                turn_delay_s=turn_ms / 1000,
                config=GraphConfig(resolver=resolver),
            )
        )
        rows, _ = read_results(out / "results.jsonl")
        groups: dict[str, dict[str, list[dict]]] = defaultdict(lambda: defaultdict(list))
        for r in rows:
            qtype = str(r["id"]).split("__")[0]
            for key in ("all", qtype):
                groups[key][r["variant"]].append(r)
        table = {}
        for key in sorted(groups, key=lambda k: (k != "all", k)):
            dag, seq = _figures(groups[key]["parallel"]), _figures(groups[key]["sequential"])
            table[key] = {
                "dag": dag,
                "sequential": seq,
                "policy_calls_ratio": _ratio(dag["policy_calls"], seq["policy_calls"]),
                "latency_p50_ratio": _ratio(dag["p50_ms"], seq["p50_ms"]),
                "gold_recall_ratio": _ratio(dag["gold_recall"], seq["gold_recall"]),
            }
        results["resolvers"][resolver] = table
        print(f"\nresolver {resolver} (oracle, {turn_ms:.0f} ms per policy turn; dag vs sequential)")
        print(f"{'type':8s} {'n':>4s} {'calls':>11s} {'ratio':>6s} {'stages':>11s} {'resolver':>8s} "
              f"{'p50 ms':>13s} {'ratio':>6s} {'gold recall':>13s}")  # fmt: skip
        for key, row in table.items():
            d, s = row["dag"], row["sequential"]
            print(
                f"{key:8s} {d['n']:4d} {d['policy_calls']:5.2f}/{s['policy_calls']:5.2f} {row['policy_calls_ratio']:6.3f} "
                f"{d['search_rounds']:5.2f}/{s['search_rounds']:5.2f} {d['resolver_calls']:8.2f} "
                f"{d['p50_ms']:6.0f}/{s['p50_ms']:6.0f} {row['latency_p50_ratio']:6.3f} "
                f"{d['gold_recall'] or 0:6.3f}/{s['gold_recall'] or 0:6.3f}"
            )
    write("dag_graph", results)
    return results


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--limit", type=int, help="the first N questions only (a quick look)")
    ap.add_argument("--concurrency", type=int, default=4, help="questions in flight (default 4)")
    ap.add_argument(
        "--turn-ms", type=float, default=TURN_MS, help="simulated time per policy turn (default 200)"
    )
    args = ap.parse_args()
    run(args.limit, args.concurrency, args.turn_ms)
