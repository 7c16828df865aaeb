"""Stores opened at the first search (``make_parts(..., defer_stores=True)``, what
``langgraph_app`` builds its graphs with): nothing opens at build time, the first search opens
once however many sub-queries arrive, the opening is not counted against the search timeout, and a
store that cannot be opened stops the run naming it (a later run tries again).
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from pathlib import Path

import pytest
from store_probes import CachingEncoder

from parallelsearch.agents.policies import OraclePolicy
from parallelsearch.agents.searchers import as_searcher
from parallelsearch.agents.searchers.base import SearcherOpenError
from parallelsearch.agents.searchers.deferred import DeferredSearcher
from parallelsearch.demo_data import HOTPOTQA_SAMPLE
from parallelsearch.graphs import build_parallel_search_graph
from parallelsearch.graphs.factory import (
    SEARCHER_KINDS,
    SearcherKind,
    make_parts,
    make_searcher,
    writing_store,
)
from parallelsearch.stores import Passage, RetrievalConfig, ingest

QUESTION = {
    "question": "Between Greyia and Calibanus, which has more species?",
    "metadata": {"golden_answers": ["Greyia"], "supporting_titles": ["Greyia", "Calibanus"]},
}


@pytest.fixture(scope="module")
def sample(tmp_path_factory):
    """The first 4 questions' paragraphs of the shipped HotpotQA sample (Greyia and Calibanus among them)."""
    lines = HOTPOTQA_SAMPLE.read_text(encoding="utf-8").splitlines()[:4]
    path = tmp_path_factory.mktemp("sample") / "hotpotqa_sample_4.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def encoded():
    """The sample's paragraphs encoded once for the module (per embedder), not once per store."""
    encoders: dict[int, CachingEncoder] = {}
    return lambda embedder: encoders.setdefault(id(embedder), CachingEncoder(embedder))


class SlowOpen:
    """An opener that takes ``delay_s`` and counts its calls (from any thread)."""

    def __init__(self, delay_s: float = 0.0):
        self.delay_s, self.calls, self._lock = delay_s, 0, threading.Lock()

    def __call__(self):
        with self._lock:
            self.calls += 1
        time.sleep(self.delay_s)

        async def wiki(query: str, k: int) -> list[Passage]:
            return [Passage(query, query, f"{query} is a genus.", 1.0, "wiki")]

        return as_searcher(wiki)


def test_a_real_store_opens_at_the_first_search(tmp_path, sample, encoded):
    cfg = RetrievalConfig(chroma_path=tmp_path / "chroma", stores=["sample"], encoder_backend="torch")
    with writing_store(cfg, "sample") as store:
        ingest(store, [sample], encoder=encoded(store.embedder), progress=False)
    parts = make_parts(["parallel"], policy=OraclePolicy(), retrieval=cfg, defer_stores=True)
    searcher = parts.searcher
    assert isinstance(searcher, DeferredSearcher) and searcher.inner is None
    assert searcher.store_names() == ["sample"] and searcher.info() == [{"name": "sample", "opened": False}]
    out = asyncio.run(parts.graph("parallel").ainvoke(QUESTION))
    assert out["answer"] == "Greyia" and out["errors"] == 0 and out["passages"] == 6
    assert searcher.inner is not None and searcher.info()[0]["count"] == store.count()
    assert searcher.embedder is searcher.inner.store.embedder  # the passage resolver's encoder


def test_one_open_for_concurrent_first_searches_and_not_within_the_search_timeout():
    opener = SlowOpen(delay_s=0.5)
    searcher = DeferredSearcher(opener, ["wiki"])
    graph = build_parallel_search_graph(OraclePolicy(), searcher, search_timeout_s=0.2, search_retries=0)
    out = asyncio.run(graph.ainvoke(QUESTION))  # two sub-queries in the first round
    assert out["errors"] == 0 and out["answer"] == "Greyia" and opener.calls == 1
    assert asyncio.run(graph.ainvoke(QUESTION))["errors"] == 0 and opener.calls == 1


def test_a_missing_store_stops_the_run_naming_it_and_the_next_run_tries_again(tmp_path, sample, encoded):
    cfg = RetrievalConfig(chroma_path=tmp_path / "chroma", stores=["sample"], encoder_backend="torch")
    with writing_store(cfg, "other") as store:
        ingest(store, [sample], encoder=encoded(store.embedder), progress=False)
    parts = make_parts(["parallel"], policy=OraclePolicy(), retrieval=cfg, defer_stores=True)
    graph = parts.graph("parallel")
    with pytest.raises(
        SearcherOpenError,
        match=r"could not open the stores \['sample'\] at .*StoreNotFoundError: no store named 'sample'.*stores there: other",
    ):
        asyncio.run(graph.ainvoke(QUESTION))
    with writing_store(cfg, "sample") as store:
        ingest(store, [sample], encoder=encoded(store.embedder), progress=False)
    assert asyncio.run(graph.ainvoke(QUESTION))["errors"] == 0


def test_a_remote_retriever_is_not_deferred():
    cfg = RetrievalConfig(retriever_url="http://127.0.0.1:9/retrieve")
    parts = make_parts(["parallel"], policy=OraclePolicy(), retrieval=cfg, defer_stores=True)
    assert type(parts.searcher).__name__ == "RemoteSearcher"


class JsonlSearcher:
    """A searcher kind over a JSONL corpus (``{"title", "text"}`` lines) whose ``stores`` are file
    paths, not Chroma names: what a contributor registers in ``SEARCHER_KINDS``."""

    def __init__(self, paths: list[str]):
        rows = [json.loads(line) for p in paths for line in Path(p).read_text(encoding="utf-8").splitlines()]
        self.rows, self.name = rows, "jsonl"

    async def asearch(self, query: str, k: int = 3) -> list[Passage]:
        hits = [r for r in self.rows if r["title"].lower() in query.lower()] or self.rows
        return [Passage(r["title"], r["title"], r["text"], 1.0, "jsonl") for r in hits[:k]]


@pytest.fixture
def jsonl_corpus(tmp_path):
    path = tmp_path / "genera.jsonl"
    rows = [
        {"title": "Greyia", "text": "Greyia has three species."},
        {"title": "Calibanus", "text": "one species."},
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


@pytest.mark.parametrize("deferred", [False, True], ids=["opener", "declared-names"])
def test_a_registered_kind_over_files_builds_deferred_as_make_searcher_does(
    monkeypatch, jsonl_corpus, deferred
):
    """The deferred build (``langgraph dev``) reads the kind's entry like :func:`make_searcher`: a kind
    whose ``stores`` are file paths builds (at once, or at its first search when it declares the
    names it will search), and answers from its corpus."""
    opened: list[str] = []

    def open_jsonl(cfg: RetrievalConfig) -> JsonlSearcher:
        opened.append("open")
        return JsonlSearcher(cfg.stores)

    entry = SearcherKind(open_jsonl, deferred_names=lambda cfg: ["genera"]) if deferred else open_jsonl
    monkeypatch.setitem(SEARCHER_KINDS, "jsonl", entry)
    cfg = RetrievalConfig(searcher="jsonl", stores=[str(jsonl_corpus)])
    assert isinstance(make_searcher(cfg), JsonlSearcher)
    opened.clear()
    parts = make_parts(["parallel"], policy=OraclePolicy(), retrieval=cfg, defer_stores=True)
    assert isinstance(parts.searcher, DeferredSearcher) is deferred and opened == (
        [] if deferred else ["open"]
    )
    out = asyncio.run(parts.graph("parallel").ainvoke(QUESTION))
    assert out["answer"] == "Greyia" and out["errors"] == 0 and opened == ["open"]
    assert "Greyia has three species." in out["transcript"]
