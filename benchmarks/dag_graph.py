"""Dependent sub-queries in one turn against one query per turn: the oracle on MuSiQue.

Goal: the ``dag`` plan (every hop in one search, ``#k`` resolved by the graph stage by stage)
takes <= 0.62x the policy calls of the sequential graph and <= 0.7x its latency at a simulated
200 ms per policy turn, per resolver (``passage``, ``gold``), the two graphs interleaved
question by question. Figures: docs/performance.md, "Dependent sub-queries in one turn".
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from collections import defaultdict
from pathlib import Path

from _common import RAW, latency, mean, parser, print_table, write

from parallelsearch.agents.policies import OraclePolicy
from parallelsearch.data import load_questions
from parallelsearch.eval import evaluate
from parallelsearch.eval.runner import read_results
from parallelsearch.graphs import GraphConfig
from parallelsearch.stores import ChromaStore, ingest

MUSIQUE = RAW / "musique" / "AdelWang_MIGRES" / "musique.json"
TURN_MS = 200.0
FIELDS = ("policy_calls", "search_rounds", "resolver_calls", "gold_recall")
PAIRS = (("policy_calls", 2), ("search_rounds", 2), ("p50_ms", 0), ("gold_recall", 3))  # dag/sequential


def _figures(rows: list[dict]) -> dict:
    ok = [r for r in rows if not r.get("error")]
    out = {f: mean(r.get(f) for r in ok) for f in FIELDS}
    return {**out, "n": len(ok), "failed": len(rows) - len(ok), **latency([r["latency_ms"] for r in ok], 1)}


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
        cells = [
            [key, str(row["dag"]["n"]), f"{row['dag']['resolver_calls']:.2f}"]
            + [
                f"{row['dag'][f] or 0:.{digits}f}/{row['sequential'][f] or 0:.{digits}f}"
                for f, digits in PAIRS
            ]
            + [f"{row['policy_calls_ratio']:.3f}", f"{row['latency_p50_ratio']:.3f}"]
            for key, row in table.items()
        ]
        print_table(
            ["type", "n", "resolver", "calls", "stages", "p50_ms", "gold_recall", "calls_ratio", "p50_ratio"],
            cells,
        )
    return write("dag_graph", results)


if __name__ == "__main__":
    ap = parser(__doc__)
    ap.add_argument("--limit", type=int, help="the first N questions only (a quick look)")
    ap.add_argument("--concurrency", type=int, default=4, help="questions in flight")
    ap.add_argument("--turn-ms", type=float, default=TURN_MS, help="simulated time per policy turn")
    run(**vars(ap.parse_args()))
