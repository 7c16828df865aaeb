"""Latency of 1 query vs 4 concurrent (coalesced) vs 4 sequential queries on one store
(goal: 4 concurrent <= 1.1x of 1), and recall@3 of gold supporting paragraphs on HotpotQA
comparison questions: (a) the full question, (b) one query per supporting title."""

from __future__ import annotations

import asyncio
import statistics
import time

from _common import hotpot_store, write

REPEATS = 15


def timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return (time.perf_counter() - t0) * 1000


def main() -> dict:
    store, recs = hotpot_store(150)
    qs = ["Scott Derrickson", "Ed Wood", "Moscow State University", "Tyler Bates"]

    async def concurrent():
        await asyncio.gather(*(store.asearch(q, 3) for q in qs))

    async def sequential():
        for q in qs:
            await store.asearch(q, 3)

    store.search(qs[0])
    one = statistics.median(timed(lambda: asyncio.run(store.asearch(qs[0], 3))) for _ in range(REPEATS))
    conc = statistics.median(timed(lambda: asyncio.run(concurrent())) for _ in range(REPEATS))
    seq = statistics.median(timed(lambda: asyncio.run(sequential())) for _ in range(REPEATS))
    print(
        f"1 query {one:.1f} ms, 4 concurrent {conc:.1f} ms ({conc / one:.2f}x, goal <= 1.1), 4 sequential {seq:.1f} ms ({seq / one:.2f}x)"
    )
    comp = [r for r in recs if r.get("type") == "comparison"]
    hit_q = hit_t = total = 0
    for r in comp:
        gold = list(dict.fromkeys(t for t, _ in r["supporting_facts"]))
        total += len(gold)
        whole = {p.title for p in store.search(r["question"], 3)}
        per = {p.title for hits in store.search_batch(gold, 3) for p in hits}
        hit_q += len(set(gold) & whole)
        hit_t += len(set(gold) & per)
    rq, rt = hit_q / total, hit_t / total
    print(
        f"recall@3 on {len(comp)} comparison questions ({total} gold paragraphs): full question {rq:.3f}, one query per title {rt:.3f}"
    )
    return write(
        "retrieve",
        {
            "one_ms": round(one, 2),
            "four_concurrent_ms": round(conc, 2),
            "four_sequential_ms": round(seq, 2),
            "concurrent_over_one": round(conc / one, 3),
            "sequential_over_one": round(seq / one, 3),
            "comparison_questions": len(comp),
            "recall3_full_question": round(rq, 3),
            "recall3_per_title": round(rt, 3),
            "store_passages": store.count(),
        },
    )


if __name__ == "__main__":
    main()
