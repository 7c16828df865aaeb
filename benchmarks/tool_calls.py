"""Tool calls vs tags on the demo's 94 parallelizable questions (goal: equal rounds, policy calls
and encoder calls per round; graph overhead per turn within 1.2x of the tags protocol).

The oracle (tags) against a scripted tool-calling chat model making the same plan (tools),
interleaved per question: counts over a real Chroma store, graph overhead over an instant
searcher. Figures: docs/performance.md, "Tool calls vs tags".
"""

from __future__ import annotations

import asyncio
import json
import statistics
import time
from pathlib import Path
from typing import Any

from _common import OUT, InstantSearcher, alternating, graph_input, records_store, rounded, write

from parallelsearch.agents.policies import ChatModelPolicy, OraclePolicy
from parallelsearch.agents.policies.scripted_chat import ScriptedToolChatModel
from parallelsearch.data import load_questions
from parallelsearch.demo_data import HOTPOTQA_SAMPLE
from parallelsearch.graphs.builders import build_parallel_search_graph

BLOCKS = 12
PROTOCOLS = ("tags", "tools")


def timed(policy: Any) -> list[float]:
    """Wrap ``policy.agenerate`` to add up the seconds spent inside it."""
    spent = [0.0]
    inner = policy.agenerate

    async def agenerate(request):
        t0 = time.perf_counter()
        try:
            return await inner(request)
        finally:
            spent[0] += time.perf_counter() - t0

    policy.agenerate = agenerate
    return spent


def parallel_questions() -> tuple[list[dict], list[dict]]:
    """The sample's parallelizable (comparison) questions as graph input, and their HotpotQA records."""
    questions = [q for q in load_questions(HOTPOTQA_SAMPLE) if q["metadata"].get("split") == "parallel"]
    ids = {q["id"] for q in questions}
    records = [json.loads(line) for line in Path(HOTPOTQA_SAMPLE).read_text().splitlines() if line.strip()]
    return [graph_input(q) for q in questions], [r for r in records if r.get("_id") in ids]


def planners(questions: list[dict]) -> dict[str, Any]:
    """The oracle (tags) and the scripted tool-calling chat model with the same plans (tools)."""
    plans = {
        q["question"].strip(): (
            [OraclePolicy.plan(q["question"], q["metadata"])],
            q["metadata"]["golden_answers"][0],
        )
        for q in questions
    }
    return {"tags": OraclePolicy(), "tools": ChatModelPolicy(ScriptedToolChatModel.from_plans(plans))}


def counts(questions: list[dict], records: list[dict]) -> dict[str, Any]:
    # indexed once (minutes on 2 cores), reused by later runs
    store, _ = records_store(records, "toolbench", OUT / "tool_calls_store")
    batches: list[list[str]] = []
    original = store.search_batch

    def search_batch(queries, k=3):
        batches.append(list(queries))
        return original(queries, k)

    store.search_batch = search_batch  # type: ignore[method-assign]
    graphs = {
        name: build_parallel_search_graph(p, store, protocol=name) for name, p in planners(questions).items()
    }
    keys = ("policy_calls", "search_rounds", "subqueries", "passages", "answer")
    with asyncio.Runner() as runner:

        def row(name: str, i: int) -> dict:
            before = len(batches)
            out = runner.run(graphs[name].ainvoke(questions[i]))
            extra = {"encoder_calls": len(batches) - before, "protocol": out["protocol"]}
            return {**{k: out[k] for k in keys}, **extra}

        rows = alternating(PROTOCOLS, range(len(questions)), row)
    equal = sum(
        all(a[k] == b[k] for k in (*keys, "encoder_calls"))
        for a, b in zip(rows["tags"], rows["tools"], strict=True)
    )
    summary = {}
    for name, rs in rows.items():
        s = {
            k: sum(r[k] for r in rs) for k in ("policy_calls", "search_rounds", "subqueries", "encoder_calls")
        }
        per_round = round(s["encoder_calls"] / max(1, s["search_rounds"]), 3)
        summary[name] = {"protocol": rs[0]["protocol"], **s, "encoder_calls_per_round": per_round}
    return {"questions": len(questions), "store_passages": store.count(), "equal_questions": equal, **summary}


def overhead(questions: list[dict]) -> dict[str, Any]:
    policies = planners(questions)
    spent = {name: timed(p) for name, p in policies.items()}
    graphs = {
        name: build_parallel_search_graph(p, InstantSearcher(), protocol=name) for name, p in policies.items()
    }

    async def block(name: str) -> tuple[float, float]:
        """(total, graph only) ms per policy turn over all the questions."""
        spent[name][0] = 0.0
        t0 = time.perf_counter()
        turns = 0
        for inp in questions:
            turns += (await graphs[name].ainvoke(inp))["policy_calls"]
        seconds = time.perf_counter() - t0
        return seconds * 1000 / turns, (seconds - spent[name][0]) * 1000 / turns

    with asyncio.Runner() as runner:
        for name in graphs:  # warm-up
            runner.run(block(name))
        blocks = alternating(PROTOCOLS, range(BLOCKS), lambda name, _: runner.run(block(name)))
    total, graph_only = ({name: [b[j] for b in bs] for name, bs in blocks.items()} for j in (0, 1))
    # each block pair ran back to back, so its ratio is the least disturbed by the machine's load
    paired = sorted(t / g for t, g in zip(graph_only["tools"], graph_only["tags"], strict=True))
    paired_total = sorted(t / g for t, g in zip(total["tools"], total["tags"], strict=True))
    return {
        "blocks": BLOCKS,
        "ms_per_turn_total": rounded({k: statistics.median(v) for k, v in total.items()}, 3),
        "ms_per_turn_graph_overhead": rounded({k: statistics.median(v) for k, v in graph_only.items()}, 3),
        "graph_overhead_ratio_tools_over_tags": round(statistics.median(paired), 3),
        "graph_overhead_ratio_range": [round(paired[0], 3), round(paired[-1], 3)],
        "total_ratio_tools_over_tags": round(statistics.median(paired_total), 3),
    }


def main() -> dict:
    questions, records = parallel_questions()
    c = counts(questions, records)
    print(
        f"{c['questions']} parallelizable demo questions over a real store ({c['store_passages']} passages): "
        f"{c['equal_questions']}/{c['questions']} with equal counts; "
        + "; ".join(
            f"{p}: {c[p]['policy_calls']} policy calls, {c[p]['search_rounds']} rounds, {c[p]['subqueries']} "
            f"sub-queries, {c[p]['encoder_calls_per_round']} encoder calls per round"
            for p in PROTOCOLS
        )
    )
    o = overhead(questions)
    g, t = o["ms_per_turn_graph_overhead"], o["ms_per_turn_total"]
    print(
        f"graph overhead per policy turn: tags {g['tags']:.3f} ms, tools {g['tools']:.3f} ms "
        f"({o['graph_overhead_ratio_tools_over_tags']:.2f}x, median of {o['blocks']} block pairs, range "
        f"{o['graph_overhead_ratio_range'][0]:.2f}-{o['graph_overhead_ratio_range'][1]:.2f}x; goal <= 1.2x); "
        "with the policy call: "
        f"tags {t['tags']:.3f} ms, tools {t['tools']:.3f} ms ({o['total_ratio_tools_over_tags']:.2f}x)"
    )
    return write("tool_calls", {"counts": c, "overhead": o})


if __name__ == "__main__":
    main()
