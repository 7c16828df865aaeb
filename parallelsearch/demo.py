"""``parallelsearch demo``: the README's main job, offline on a fresh CPU machine.

Builds (once, cached under the settings' home) an embedded store from the HotpotQA
sample shipped in the package, then shows retrieval for a comparison question asked
whole versus split into one sub-query per compared entity (what ParallelSearch does).
"""

from __future__ import annotations

import argparse

from parallelsearch.demo_data import HOTPOTQA_SAMPLE
from parallelsearch.registry import open_store
from parallelsearch.stores import ChromaStore, ingest, load_questions

DEMO_STORE = "hotpotqa-demo"


def demo_store(progress: bool = True) -> ChromaStore:
    """The demo store, indexed on first use (idempotent: later runs add nothing)."""
    store = open_store(DEMO_STORE, create=True)
    if store.count() == 0:
        rep = ingest(store, [HOTPOTQA_SAMPLE], progress=progress)
        print(f"indexed {rep.added} passages into {store.name} ({store.location}) in {rep.seconds:.1f} s")
    return store


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("demo", help="offline demo on a real HotpotQA sample shipped with the package")
    p.set_defaults(func=cmd_demo)


def cmd_demo(args: argparse.Namespace) -> int:
    store = demo_store()
    questions = [q for q in load_questions(HOTPOTQA_SAMPLE) if q["metadata"]["split"] == "parallel"][:5]
    for q in questions:
        gold = set(q["metadata"].get("supporting_titles", []))
        whole = {p.title for p in store.search(q["question"], 3)}
        subs = [p.title for hits in store.search_batch(sorted(gold), 3) for p in hits]
        print(f"\nQ: {q['question']}\n  gold titles: {sorted(gold)}")
        print(f"  whole question top-3 recall: {len(gold & whole)}/{len(gold)}")
        print(f"  one sub-query per entity recall: {len(gold & set(subs))}/{len(gold)}")
    return 0
