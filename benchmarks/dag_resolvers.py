"""Per-hop recall@3 of dependent sub-queries (``seat of #1``) under each way of resolving ``#k``.

Goal: the ``passage`` resolver (no model call) reaches >= 0.9x the ``gold`` resolver's recall
on dependent hops (MuSiQue and 2WikiMultihopQA, never the holdout). Each question's hops run
stage by stage over a real Chroma store, a dependent hop resolved from its parents' top-3
passages as that method searched them; with ``gold`` run, the floor of any passage-based
resolver is printed too (:func:`passage_bound`). Methods and figures: docs/performance.md,
"Resolving ``#k`` without a model".
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from pathlib import Path

from _common import RAW, parser, print_table, write
from tqdm import tqdm

from parallelsearch.agents.resolvers import (
    GoldResolver,
    ParentResult,
    PassageResolver,
    answer_candidates,
    span_candidates,
)
from parallelsearch.agents.subquery_plan import substitute
from parallelsearch.data import prepare
from parallelsearch.stores import ChromaStore, Passage, ingest

FILES = {
    "musique": RAW / "musique" / "AdelWang_MIGRES" / "musique.json",
    "2wiki": RAW / "2wikimultihopqa" / "hahahajw_Agentic-RAG" / "2WikiMultihopQA_500_benchmark.json",
}
K = 3

Resolve = Callable[[str, Sequence[ParentResult]], "str | list[str]"]


def hop_query(question: str) -> str:
    """A hop's sub-question as the oracle searches it (MuSiQue's ``>>`` is a space)."""
    return " ".join(question.replace(">>", " ").split())


def qtype(dataset: str, q: dict) -> str:
    return q["id"].split("_")[0] if dataset == "musique" else q["metadata"]["type"]


def open_store(dataset: str, folder: Path) -> ChromaStore:
    store = ChromaStore(f"dag-{dataset}", path=folder)
    if store.count() == 0:
        t0 = time.perf_counter()
        ingest(store, [FILES[dataset]], progress=True)
        print(f"{dataset}: {store.count()} paragraphs encoded in {time.perf_counter() - t0:.0f} s")
    return store


def spans_merged(sub_query: str, parents: Sequence[ParentResult]) -> list[str]:
    """The first 8 spans of each parent's top passage, each substituted: searched and merged."""
    options = [(span_candidates(p.passages[0].text)[:8] if p.passages else []) or [""] for p in parents]
    out = [
        substitute(sub_query, {p.k: o[min(i, len(o) - 1)] for p, o in zip(parents, options, strict=True)})
        for i in range(max(len(o) for o in options))
    ]
    return list(dict.fromkeys(out))


def dropped(sub_query: str, parents: Sequence[ParentResult]) -> str:
    """The sub-query with every ``#k`` removed."""
    return substitute(sub_query, {p.k: "" for p in parents})


#: the resolvers compared, in the order :func:`methods` gives them
METHODS = (
    "gold",
    "dropped",
    "title",
    "text",
    "spans-merged",
    "passage-no-cue",
    "passage-no-title",
    "passage",
    "ceiling",
)


def methods(store: ChromaStore) -> dict[str, Resolve]:
    gold = GoldResolver()

    def ceiling(sub_query: str, parents: Sequence[ParentResult]) -> str:
        found = all(p.gold in {c for c, _ in answer_candidates(p)} for p in parents)
        return gold(sub_query, parents) if found else dropped(sub_query, parents)

    return {
        "gold": gold,
        "dropped": dropped,
        "title": lambda s, ps: substitute(s, {p.k: p.passages[0].title if p.passages else "" for p in ps}),
        "text": lambda s, ps: " ".join([dropped(s, ps), *(p.passages[0].text for p in ps if p.passages)]),
        "spans-merged": spans_merged,
        "passage-no-cue": PassageResolver(store, cue_weight=0.0),
        "passage-no-title": PassageResolver(store, title_weight=0.0),
        "passage": PassageResolver(store),
        "ceiling": ceiling,
    }


def run_method(
    store: ChromaStore, questions: list[dict], resolve: Resolve, first: dict[str, list[Passage]], name: str
) -> dict[tuple[int, int], list[Passage]]:
    """Top-k of every hop of every question, dependent hops resolved by ``resolve``."""
    results: dict[tuple[int, int], list[Passage]] = {}
    for qi, q in enumerate(tqdm(questions, desc=name, leave=False)):
        hops = q["metadata"]["hops"]
        searched: dict[int, str] = {}
        for hi in _depth_order(hops):
            h = hops[hi]
            query = hop_query(h["question"])
            if h["refs"]:
                parents = [
                    ParentResult(
                        k=k,
                        searched=searched[k - 1],
                        passages=tuple(results[(qi, k - 1)]),
                        written=hop_query(hops[k - 1]["question"]),
                        gold=hops[k - 1]["answer"],
                    )
                    for k in h["refs"]
                ]
                out = resolve(query, parents)
                if isinstance(out, list):
                    pool: dict[str, Passage] = {}
                    for hits in store.search_batch(out, K):
                        for p in hits:
                            if p.id not in pool or (pool[p.id].score or 0) < (p.score or 0):
                                pool[p.id] = p
                    results[(qi, hi)] = sorted(pool.values(), key=lambda p: -(p.score or 0))[:K]
                    searched[hi] = out[0]
                    continue
                query = " ".join(out.split())
                results[(qi, hi)] = store.search(query, K)
            else:
                results[(qi, hi)] = first[query]
            searched[hi] = query
    return results


def _depth_order(hops: list[dict]) -> list[int]:
    depth: dict[int, int] = {}
    for i, h in enumerate(hops):
        depth[i] = 1 + max((depth[k - 1] for k in h["refs"] if 0 < k <= i), default=0)
    return sorted(depth, key=lambda i: (depth[i], i))


def score(dataset: str, questions: list[dict], results: dict) -> dict[str, dict[str, float]]:
    """Per-hop recall@k of dependent hops and whole-question recall, per question type."""
    hop_hits, hop_n, q_rec, q_n = Counter(), Counter(), defaultdict(float), Counter()
    for qi, q in enumerate(questions):
        hops = q["metadata"]["hops"]
        t = qtype(dataset, q)
        found = set()
        for hi, h in enumerate(hops):
            titles = [p.title for p in results[(qi, hi)]]
            found |= set(titles)
            if h["refs"]:
                for g in ("all", t):
                    hop_hits[g] += h["title"] in titles
                    hop_n[g] += 1
        gold_titles = {h["title"] for h in hops}
        for g in ("all", t):
            q_rec[g] += len(gold_titles & found) / len(gold_titles)
            q_n[g] += 1
    return {
        "hop_recall": {g: hop_hits[g] / hop_n[g] for g in hop_n},
        "hops": dict(hop_n),
        "question_recall": {g: q_rec[g] / q_n[g] for g in q_n},
    }


def passage_bound(
    dataset: str, questions: list[dict], results: dict, depth: int
) -> dict[str, dict[str, float]]:
    """Per question type: the share of dependent hops whose parents' gold answers all occur in
    the parents' top-``depth`` passages, and the per-hop recall of ``results`` (the gold
    resolver's) counted on those hops only: the most a resolver reading those passages gets."""
    n, present, hits = Counter(), Counter(), Counter()
    for qi, q in enumerate(questions):
        hops = q["metadata"]["hops"]
        t = qtype(dataset, q)
        for hi, h in enumerate(hops):
            if not h["refs"]:
                continue
            found = all(
                hops[k - 1]["answer"].casefold()
                in " ".join(f"{p.title} {p.text}" for p in results[(qi, k - 1)][:depth]).casefold()
                for k in h["refs"]
            )
            hit = h["title"] in [p.title for p in results[(qi, hi)]]
            for g in ("all", t):
                n[g] += 1
                present[g] += found
                hits[g] += found and hit
    return {
        "answer_in_parents": {g: present[g] / n[g] for g in n},
        "hop_recall": {g: hits[g] / n[g] for g in n},
    }


def run(args: argparse.Namespace) -> dict:
    folder = Path(args.store_dir) if args.store_dir else Path(tempfile.mkdtemp())
    out: dict = {"k": K, "datasets": {}}
    for dataset in args.datasets:
        ds = next(iter(prepare([FILES[dataset]]).values()))
        questions = [q for q in ds.questions if any(h["refs"] for h in q["metadata"].get("hops") or [])]
        questions = questions[: args.limit] if args.limit else questions
        store = open_store(dataset, folder)
        roots = sorted(
            {hop_query(h["question"]) for q in questions for h in q["metadata"]["hops"] if not h["refs"]}
        )
        first = dict(zip(roots, store.search_batch(roots, K), strict=True))
        parent_top1 = [
            first[hop_query(q["metadata"]["hops"][k - 1]["question"])][0].title
            == q["metadata"]["hops"][k - 1]["title"]
            for q in questions
            for h in q["metadata"]["hops"]
            for k in h["refs"]
            if not q["metadata"]["hops"][k - 1]["refs"]
        ]
        figures: dict = {
            "questions": len(questions),
            "paragraphs": store.count(),
            "first_hop_parent_top1": sum(parent_top1) / max(1, len(parent_top1)),
            "methods": {},
        }
        for name, resolve in methods(store).items():
            if args.methods and name not in args.methods:
                continue
            t0 = time.perf_counter()
            res = run_method(store, questions, resolve, first, f"{dataset} {name}")
            figures["methods"][name] = {**score(dataset, questions, res), "seconds": time.perf_counter() - t0}
            if name == "gold":
                figures["passage_bound"] = {
                    f"top{d}": passage_bound(dataset, questions, res, d) for d in (1, K)
                }
        _print(dataset, figures)
        out["datasets"][dataset] = figures
    return out


def _print(dataset: str, figures: dict) -> None:
    methods_ = figures["methods"]
    gold = methods_.get("gold")
    hops = next(iter(methods_.values()))["hops"]
    groups = sorted(hops, key=lambda g: (g != "all", g))
    bounds = figures.get("passage_bound", {})
    print(
        f"\n{dataset}: {figures['questions']} questions, {figures['paragraphs']} paragraphs; "
        f"a first hop's top passage is its parent's gold paragraph {figures['first_hop_parent_top1']:.3f}"
    )
    print("per-hop recall@3 of dependent hops (ratio to gold)")
    gold_hops = gold["hop_recall"] if gold else {}
    rows = [[name, *_cells(m["hop_recall"], gold_hops, groups)] for name, m in methods_.items()]
    rows += [["bound " + depth, *_cells(b["hop_recall"], gold_hops, groups)] for depth, b in bounds.items()]
    print_table(["method", *(f"{g} ({hops[g]})" for g in groups)], rows)
    for depth, b in bounds.items():
        shares = ", ".join(f"{g} {b['answer_in_parents'][g]:.3f}" for g in groups)
        print(f"gold answer in the parents' {depth} passages: {shares}")
    print("whole-question gold-paragraph recall (ratio to gold)")
    gold_all = gold["question_recall"] if gold else {}
    print_table(
        ["method", "all"],
        [[n, *_cells(m["question_recall"], gold_all, ["all"])] for n, m in methods_.items()],
    )


def _cells(recall: dict[str, float], gold: dict[str, float], groups: list[str]) -> list[str]:
    """Each group's recall, with its ratio to gold's where gold has one."""
    return [f"{recall[g]:.3f}" + (f" {recall[g] / gold[g]:.2f}x" if gold.get(g) else "") for g in groups]


def main() -> None:
    p = parser(__doc__)
    p.add_argument("--datasets", nargs="+", default=list(FILES), choices=list(FILES))
    p.add_argument("--methods", nargs="*", choices=METHODS, help="only these methods (none given: all)")
    p.add_argument("--limit", type=int, default=0, help="only the first N questions with dependent hops")
    p.add_argument("--store-dir", help="keep the encoded stores here and reuse them (none: a temporary one)")
    args = p.parse_args()
    write("dag_resolvers", run(args))


if __name__ == "__main__":
    main()
