"""The demo store is searched exhaustively: what it ranks equals a brute-force ranking of its own
vectors, so a learning run or a demo over it gives the same passages in every process."""

from __future__ import annotations

import json

import numpy as np
import pytest

from parallelsearch.demo_data import DEMO_EF_SEARCH, HOTPOTQA_SAMPLE, demo_store
from parallelsearch.stores.chroma_store import hnsw_of, set_ef_search

QUESTIONS = 40


@pytest.fixture
def store():
    return demo_store(QUESTIONS, progress=False)


def brute_force(store, queries: list[str]) -> tuple[list[str], np.ndarray]:
    """The store's ids and every query's cosine score against each of its vectors."""
    got = store.collection.get(include=["embeddings"])
    vecs = np.asarray(got["embeddings"], dtype=np.float64)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    q = np.asarray(store.embedder.encode_queries(queries), dtype=np.float64)
    q /= np.linalg.norm(q, axis=1, keepdims=True)
    return got["ids"], q @ vecs.T


def test_demo_store_ranks_as_brute_force(store):
    lines = HOTPOTQA_SAMPLE.read_text(encoding="utf-8").splitlines()[:QUESTIONS]
    records = [json.loads(line) for line in lines]
    queries = [r["question"] for r in records] + [c[0] for r in records for c in r["context"][:3]]
    assert hnsw_of(store.collection)["ef_search"] == DEMO_EF_SEARCH > store.count()
    ids, scores = brute_force(store, queries)
    ties = 0
    for row, hits in zip(scores, store.search_batch(queries, 3), strict=True):
        best = np.sort(row)[::-1][:3]
        assert [p.score for p in hits] == pytest.approx(best.tolist(), abs=1e-5)
        within = {ids[i] for i in np.flatnonzero(row >= best[-1] - 1e-5)}
        assert {p.id for p in hits} <= within
        ties += len(within) > 3
        # passages tied exactly with the third (the same paragraph under other titles): the first by id
        tied = sorted(ids[i] for i in np.flatnonzero(np.abs(row - best[-1]) <= 1e-9))
        kept = [p.id for p in hits if p.id in tied]
        assert kept == tied[: len(kept)]
        # equal scores come back by id, whatever order the index found them in
        assert [p.id for p in hits] == [p.id for p in sorted(hits, key=lambda p: (-p.score, p.id))]
    assert ties  # the sample holds duplicate paragraphs under other titles: the tie rule was exercised


def test_an_older_demo_store_gets_the_exhaustive_search(store):
    set_ef_search(store.collection, 100)  # as an older version left it
    assert hnsw_of(demo_store(QUESTIONS, progress=False).collection)["ef_search"] == DEMO_EF_SEARCH
