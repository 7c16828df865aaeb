"""Latency of 1 query vs 4 concurrent (coalesced) vs 4 sequential queries on one store
(goal: 4 concurrent <= 1.1x of 1), and recall@3 of gold supporting paragraphs on HotpotQA
comparison questions: (a) the full question, (b) one query per supporting title.

``batched`` rows call ``search_batch`` directly: ``batched4_over_batched1`` is how the encoder
and Chroma scale from 1 to 4 queries here, the floor under ``concurrent_over_one``. All
variants run interleaved on one persistent event loop.
"""

from __future__ import annotations

import asyncio

from _common import hotpot_store, interleaved_ms, write

REPEATS = 25
QUERIES = ["Scott Derrickson", "Ed Wood", "Moscow State University", "Tyler Bates"]


def latencies(store, runner: asyncio.Runner) -> dict[str, float]:
    """Median ms of each variant over REPEATS interleaved rounds."""

    async def one():
        await store.asearch(QUERIES[0], 3)

    async def concurrent():
        await asyncio.gather(*(store.asearch(q, 3) for q in QUERIES))

    async def sequential():
        for q in QUERIES:
            await store.asearch(q, 3)

    variants = {
        "one": lambda: runner.run(one()),
        "four_concurrent": lambda: runner.run(concurrent()),
        "four_sequential": lambda: runner.run(sequential()),
        "batched_one": lambda: store.search_batch(QUERIES[:1], 3),
        "batched_four": lambda: store.search_batch(QUERIES, 3),
    }
    return interleaved_ms(variants, REPEATS)


def recall(store, recs: list[dict]) -> tuple[int, int, float, float]:
    comp = [r for r in recs if r.get("type") == "comparison"]
    hit_q = hit_t = total = 0
    for r in comp:
        gold = list(dict.fromkeys(t for t, _ in r["supporting_facts"]))
        total += len(gold)
        whole = {p.title for p in store.search(r["question"], 3)}
        per = {p.title for hits in store.search_batch(gold, 3) for p in hits}
        hit_q += len(set(gold) & whole)
        hit_t += len(set(gold) & per)
    return len(comp), total, hit_q / total, hit_t / total


def main() -> dict:
    store, recs = hotpot_store(150)
    with asyncio.Runner() as runner:
        ms = latencies(store, runner)
    one, conc, seq = ms["one"], ms["four_concurrent"], ms["four_sequential"]
    b1, b4 = ms["batched_one"], ms["batched_four"]
    print(
        f"1 query {one:.1f} ms, 4 concurrent {conc:.1f} ms ({conc / one:.2f}x, goal <= 1.1), "
        f"4 sequential {seq:.1f} ms ({seq / one:.2f}x)"
    )
    print(
        f"one batched call: 1 query {b1:.1f} ms, 4 queries {b4:.1f} ms ({b4 / b1:.2f}x = this machine's floor "
        f"for the goal); 4 concurrent over one batched call of 4: {conc / b4:.2f}x"
    )
    n_comp, total, rq, rt = recall(store, recs)
    print(
        f"recall@3 on {n_comp} comparison questions ({total} gold paragraphs): "
        f"full question {rq:.3f}, one query per title {rt:.3f}"
    )
    return write(
        "retrieve",
        {
            "repeats": REPEATS,
            **{f"{name}_ms": round(v, 2) for name, v in ms.items()},
            "concurrent_over_one": round(conc / one, 3),
            "sequential_over_one": round(seq / one, 3),
            "concurrent_over_batched4": round(conc / b4, 3),
            "batched4_over_batched1": round(b4 / b1, 3),
            "comparison_questions": n_comp,
            "recall3_full_question": round(rq, 3),
            "recall3_per_title": round(rt, 3),
            "store_passages": store.count(),
        },
    )


if __name__ == "__main__":
    main()
