"""Every store kind of ``STORE_KINDS`` through the same life: ``index`` (ingest), a second
``index`` (resume: nothing added), ``index --verify`` and ``stores --check``, ``stores``, ``search``,
the graphs' searcher and ``serve-retriever``'s ``/retrieve``. Real Chroma, real FAISS, the real
encoder and the shipped HotpotQA sample; then the kinds' answers are compared with each other."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import httpx
import numpy as np
import pytest
from conftest import UvicornThread
from store_probes import cli

from parallelsearch.demo_data import HOTPOTQA_SAMPLE
from parallelsearch.graphs.factory import STORE_KINDS, make_named_store, make_searcher
from parallelsearch.settings import Settings
from parallelsearch.stores.http.retrieval_server import create_retrieval_app

QUERIES = ["Scott Derrickson nationality", "Ed Wood films", "Russian football goalkeeper"]
STORE = "contract"


@pytest.fixture(scope="module")
def sample(tmp_path_factory) -> Path:
    lines = HOTPOTQA_SAMPLE.read_text(encoding="utf-8").splitlines()[:3]
    path = tmp_path_factory.mktemp("sample") / "sample.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def homes(tmp_path_factory, sample) -> dict[str, Path]:
    """One home per kind, each holding the store made by ``index`` and resumed once."""
    out = {}
    for kind in STORE_KINDS:
        home = tmp_path_factory.mktemp(kind) / "home"
        first = cli(home, "index", "--store-kind", kind, "--store", STORE, str(sample), "--no-progress")
        assert first.returncode == 0, first.stderr
        again = cli(home, "index", "--store-kind", kind, "--store", STORE, str(sample), "--no-progress")
        assert again.returncode == 0, again.stderr
        added = int(first.stdout.split("added ")[1].split(",")[0])
        assert added > 20 and f"added 0, already present {added}," in again.stdout
        out[kind] = home
    return out


def _cfg(home: Path, kind: str):
    return Settings(home=home, store_kind=kind, stores=[STORE]).retrieval()


@pytest.mark.parametrize("kind", list(STORE_KINDS))
def test_verify_check_and_listing(homes, kind):
    home = homes[kind]
    verify = cli(home, "index", "--store-kind", kind, "--store", STORE, "--verify", "--no-progress")
    assert verify.returncode == 0 and "vectors read back" in verify.stdout, verify.stderr
    check = cli(home, "stores", "--store-kind", kind, "--check", STORE, "--json")
    assert check.returncode == 0 and json.loads(check.stdout)["ok"]
    rows = json.loads(cli(home, "stores", "--store-kind", kind, "--json").stdout)
    assert [r["name"] for r in rows] == [STORE] and rows[0]["count"] == json.loads(check.stdout)["count"]


@pytest.mark.parametrize("kind", list(STORE_KINDS))
def test_search_graph_searcher_and_retrieve(homes, kind):
    """``search``, the graphs' searcher and ``/retrieve`` return the store's own top-k."""
    home = homes[kind]
    store = make_named_store(_cfg(home, kind), STORE)
    want = store.search_batch(QUERIES, 3)
    assert all(len(hits) == 3 for hits in want)
    out = cli(home, "search", "--store-kind", kind, "--store", STORE, QUERIES[0], "--json")
    assert [h["id"] for h in json.loads(out.stdout)] == [p.id for p in want[0]]
    searcher = make_searcher(_cfg(home, kind))
    assert [p.id for p in asyncio.run(searcher.asearch(QUERIES[1], 3))] == [p.id for p in want[1]]
    with UvicornThread(create_retrieval_app(store)) as srv:
        got = httpx.post(srv.url + "/retrieve", json={"queries": QUERIES, "topk": 3}, timeout=60).json()
        health = httpx.get(srv.url + "/health", timeout=30).json()
    assert [[d["id"] for d in docs] for docs in got["result"]] == [[p.id for p in hits] for hits in want]
    assert health["passages"] == store.count() and health["fingerprint"] == store.fingerprint()


def test_the_kinds_answer_alike(homes):
    """Every kind ranks the same passages as the first (Chroma: HNSW walking the whole graph at this
    size; FAISS: exact) with the same scores, and hashes the same corpus to the same fingerprint."""
    if len(homes) < 2:
        pytest.skip("one store kind registered: nothing to compare it with")
    answers = {}
    for kind, home in homes.items():
        store = make_named_store(_cfg(home, kind), STORE)
        answers[kind] = (store.search_batch(QUERIES, 5), store.fingerprint(), store.count())
    (a_hits, a_print, a_count), *others = answers.values()
    for b_hits, b_print, b_count in others:
        assert a_count == b_count and a_print == b_print
        assert [[p.id for p in h] for h in a_hits] == [[p.id for p in h] for h in b_hits]
        np.testing.assert_allclose(
            [p.score for h in a_hits for p in h], [p.score for h in b_hits for p in h], atol=1e-4
        )
