"""Policy calls, search rounds and latency: parallel vs sequential graph on the HotpotQA
comparison (parallelizable) questions of ../shared/data/raw, with the oracle policy.

Two runs, same questions, same store, same process: the instant oracle (policy calls and search
rounds ratios; goal: calls <= 0.60), and the oracle taking TURN_MS per turn (latency ratio).
"""

from __future__ import annotations

import asyncio
import json
import shutil

from _common import HOTPOT, records_store, write

from parallelsearch.agents.policies import OraclePolicy
from parallelsearch.data import load_questions
from parallelsearch.eval import evaluate, summarize
from parallelsearch.eval.runner import read_results

TURN_MS = 200.0


def run() -> dict:
    recs = [r for r in json.loads(HOTPOT.read_text()) if r["type"] == "comparison"]
    store, src = records_store(recs, "calls-bench", progress=True)
    tmp = src.parent
    questions = load_questions(src, dataset="hotpotqa")
    print(f"{len(questions)} comparison questions, {store.count()} passages")
    results: dict = {"questions": len(questions), "turn_ms": TURN_MS}
    for label, delay in (("instant", 0.0), ("simulated_generation", TURN_MS / 1000)):
        out = tmp / label
        asyncio.run(
            evaluate(questions, ["parallel", "sequential"], OraclePolicy(), store, out, policy_spec="oracle",
                     concurrency=4, turn_delay_s=delay)
        )  # fmt: skip
        rows, _ = read_results(out / "results.jsonl")
        s = summarize(rows, accuracy=False)
        p, q = s["parallel"]["all"], s["sequential"]["all"]
        results[label] = {
            "parallel": p,
            "sequential": q,
            "policy_calls_ratio": round(p["policy_calls"] / q["policy_calls"], 4),
            "search_rounds_ratio": round(p["search_rounds"] / q["search_rounds"], 4),
            "latency_p50_ratio": round(p["latency_p50_ms"] / q["latency_p50_ms"], 4),
            "latency_p95_ratio": round(p["latency_p95_ms"] / q["latency_p95_ms"], 4),
        }
        r = results[label]
        print(
            f"{label:21s} calls {p['policy_calls']:.2f} vs {q['policy_calls']:.2f} (ratio {r['policy_calls_ratio']}, goal <= 0.60), "
            f"rounds ratio {r['search_rounds_ratio']}, latency p50 {p['latency_p50_ms']:.0f} vs {q['latency_p50_ms']:.0f} ms "
            f"(ratio {r['latency_p50_ratio']}), DR {p['decomposition_ratio']} vs {q['decomposition_ratio']}, "
            f"gold recall {p['gold_recall']} vs {q['gold_recall']}"
        )
    shutil.rmtree(tmp, ignore_errors=True)
    return write("calls", results)


if __name__ == "__main__":
    run()
