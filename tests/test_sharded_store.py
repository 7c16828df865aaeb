"""A sharded store over real `chroma run` server processes on 127.0.0.1.

One corpus (the context paragraphs of 20 HotpotQA questions, encoded once) is split over
three collections on two servers; the sharded top-k must equal the top-k of one store
holding every passage, on every query, at an ef_search where both are exact.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from conftest import RAW, UvicornThread, free_port, needs_data
from serving import ChromaServer

from parallelsearch.stores import ChromaStore, ingest
from parallelsearch.stores.config import RetrievalConfig
from parallelsearch.stores.passages import Passage
from parallelsearch.stores.shard_spec import ShardSpec, find_store, parse_store
from parallelsearch.stores.sharded_store import ShardError, ShardHits, merge_by_distance

pytestmark = needs_data
EXACT = {"ef_search": 1000, "ef_construction": 200}


@pytest.fixture(scope="module")
def corpus(hotpot_store):
    """(passages, embeddings) of the HotpotQA store, in a fixed order, encoded once."""
    got = hotpot_store.collection.get(include=["embeddings", "documents", "metadatas"])
    rows = sorted(zip(got["ids"], got["documents"], got["metadatas"], got["embeddings"], strict=True))
    passages = [Passage(i, (m or {}).get("title", ""), d) for i, d, m, _ in rows]
    return passages, [list(e) for *_, e in rows]


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    started = [ChromaServer(tmp_path_factory.mktemp(f"chroma-srv{i}")).start() for i in range(2)]
    yield started
    for s in started:
        s.stop()


def _fill(store: ChromaStore, passages, vectors) -> ChromaStore:
    store.upsert(passages, vectors)
    return store


@pytest.fixture(scope="module")
def sharded_setup(servers, corpus, embedder, tmp_path_factory):
    """wiki-0 and wiki-1 on server 0, wiki-2 on server 1 (thirds of the corpus), and ``whole``: one
    embedded store of every passage."""
    passages, vectors = corpus
    n = len(passages)
    cuts = [0, n // 3, 2 * n // 3, n]
    for i in range(3):
        srv = servers[0] if i < 2 else servers[1]
        shard = ChromaStore(f"wiki-{i}", host="127.0.0.1", port=srv.port, embedder=embedder, hnsw=EXACT)
        _fill(shard, passages[cuts[i] : cuts[i + 1]], vectors[cuts[i] : cuts[i + 1]])
    whole = ChromaStore("whole", path=tmp_path_factory.mktemp("whole"), embedder=embedder, hnsw=EXACT)
    _fill(whole, passages, vectors)
    a, b = servers[0].port, servers[1].port
    declaration = f"wiki=wiki-0@127.0.0.1:{a},wiki-1@127.0.0.1:{a},wiki-2@127.0.0.1:{b}"
    return declaration, whole


def _sharded(declaration: str, embedder, **cfg):
    from parallelsearch.graphs.factory import make_sharded_store

    cfg.setdefault("shard_timeout_s", 300)  # an answer is awaited, not timed: a loaded machine is slow
    config = RetrievalConfig(stores=[declaration], encoder_backend="torch", **cfg)
    return make_sharded_store(config, config.store_spec("wiki"), embedder=embedder)


class CountingEmbedder:
    """The real embedder, counting query-encoder calls (the query must be embedded once, not per shard)."""

    def __init__(self, inner) -> None:
        self.inner, self.query_calls = inner, 0

    def encode_queries(self, queries):
        self.query_calls += 1
        return self.inner.encode_queries(queries)

    def __getattr__(self, name):
        return getattr(self.inner, name)


def test_sharded_top_k_equals_one_store(sharded_setup, embedder, hotpot_questions):
    declaration, whole = sharded_setup
    counting = CountingEmbedder(embedder)
    store = _sharded(declaration, counting)
    questions = [q["question"] for q in hotpot_questions]
    vectors = embedder.encode_queries(questions)
    assert len(store.shards) == 3 and store.count() == whole.count()
    for k in (1, 3, 10, 80):  # 80 is more than any shard holds
        got = store.search_batch(questions, k) if k in (3, 80) else store.search_vectors(vectors, k)
        want = whole.search_vectors(vectors, k)
        assert [[p.id for p in hits] for hits in got] == [[p.id for p in hits] for hits in want], k
        for g, w in zip(got, want, strict=True):
            assert [p.score for p in g] == pytest.approx([p.score for p in w], abs=1e-5)
            assert not g.missing and g.note is None
            assert all(p.store == "wiki" for p in g)
    assert counting.query_calls == 2  # one encoder call per batch, whatever the number of shards


def test_graph_searcher_and_settings_open_the_sharded_store(sharded_setup, embedder, hotpot_questions):
    """``stores`` holding the declaration (the settings, langgraph.json's env, the agent config) give a
    searcher over the shards; concurrent sub-queries come back as one store's would."""
    from parallelsearch.agents.searchers import guarded_search
    from parallelsearch.graphs.factory import make_searcher

    declaration, whole = sharded_setup
    searcher = make_searcher(RetrievalConfig(stores=[declaration], encoder_backend="torch"))
    assert searcher.name == "wiki" and len(searcher.info()[0]["shards"]) == 3
    questions = [q["question"] for q in hotpot_questions[:6]]

    async def run():
        return await asyncio.gather(*(guarded_search(searcher, q, 3) for q in questions))

    outcomes = asyncio.run(run())
    want = whole.search_batch(questions, 3)
    assert [[p.id for p in o.passages] for o in outcomes] == [[p.id for p in w] for w in want]
    assert all(o.error is None and o.note is None for o in outcomes)


def test_cli_search_over_a_declared_sharded_store(sharded_setup, hotpot_questions, monkeypatch, capsys):
    """``search --store NAME`` of a store the settings declare sharded, as ``serve-retriever`` opens it."""
    import json

    from parallelsearch.cli import main

    declaration, whole = sharded_setup
    monkeypatch.setenv("PARALLELSEARCH_STORES", json.dumps([declaration]))
    monkeypatch.setenv("PARALLELSEARCH_ENCODER_BACKEND", "torch")
    question = hotpot_questions[1]["question"]
    assert main(["search", "--store", "wiki", "-k", "3", "--json", question]) == 0
    got = json.loads(capsys.readouterr().out)
    assert [p["id"] for p in got] == [p.id for p in whole.search(question, 3)]


def test_openrlhf_agent_config_searches_the_shards(sharded_setup, servers):
    """The agent config takes the same declaration (``chroma_host`` is where shards without a
    location of their own live; these all name theirs)."""
    from parallelsearch.rl.agent_config import AgentConfig

    declaration, whole = sharded_setup
    cfg = AgentConfig(
        chroma_host="127.0.0.1",
        chroma_port=servers[0].port,
        store=declaration,
        encoder_backend="torch",
        shard_timeout_s=300,
    )
    searcher = cfg.make_searcher()
    assert searcher.name == "wiki" and searcher.store.count() == whole.count()


def test_retrieve_server_over_shards(sharded_setup, embedder, hotpot_questions):
    from parallelsearch.stores import RetrieverClient, create_retrieval_app

    declaration, whole = sharded_setup
    questions = [q["question"] for q in hotpot_questions[:5]]
    with UvicornThread(create_retrieval_app(_sharded(declaration, embedder))) as srv:
        got = RetrieverClient(srv.url).search_batch(questions, 4)
        health = httpx.get(f"{srv.url}/health", timeout=10).json()
    assert [[p.id for p in hits] for hits in got] == [
        [p.id for p in w] for w in whole.search_batch(questions, 4)
    ]
    assert health["passages"] == whole.count() and health["store"] == "wiki"


def test_shards_that_disagree_or_are_missing_are_named(servers, corpus, embedder, sharded_setup):
    from parallelsearch.stores.ingestion.vectors import RecordedModel

    passages, vectors = corpus
    a, b = servers[0].port, servers[1].port
    other = ChromaStore("other-model", host="127.0.0.1", port=b, embedder=RecordedModel("e5-base-v2", 384))
    _fill(other, passages[:5], vectors[:5])
    with pytest.raises(ShardError, match=rf"shard other-model@127.0.0.1:{b} of store 'wiki'.*e5-base-v2"):
        _sharded(f"wiki=wiki-0@127.0.0.1:{a},other-model@127.0.0.1:{b}", embedder)
    ip = ChromaStore("inner-product", host="127.0.0.1", port=b, embedder=embedder, hnsw={"space": "ip"})
    _fill(ip, passages[:5], vectors[:5])
    with pytest.raises(ShardError, match=rf"shard inner-product@127.0.0.1:{b} .*distance space 'ip'"):
        _sharded(f"wiki=wiki-0@127.0.0.1:{a},inner-product@127.0.0.1:{b}", embedder)
    with pytest.raises(ShardError, match=rf"shard wiki-9@127.0.0.1:{b} of store 'wiki'.*no store named"):
        _sharded(f"wiki=wiki-0@127.0.0.1:{a},wiki-9@127.0.0.1:{b}", embedder)
    with pytest.raises(ShardError, match=r"shard wiki-5@/nowhere/chroma of store 'wiki': no Chroma folder"):
        _sharded(f"wiki=wiki-0@127.0.0.1:{a},wiki-5@/nowhere/chroma", embedder)
    assert not Path("/nowhere").exists()
    dead = free_port()
    with pytest.raises(ShardError, match=rf"shard wiki-0@127.0.0.1:{dead} of store 'wiki' cannot be opened"):
        _sharded(f"wiki=wiki-0@127.0.0.1:{dead},wiki-2@127.0.0.1:{b}", embedder)


def test_stopped_server_fails_naming_the_shard_or_answers_partially(
    servers, corpus, embedder, tmp_path, hotpot_questions
):
    """A third server holding one shard is killed mid-life: the query fails naming that shard, or
    with allow_partial answers from the live shard and says which one is missing."""
    from parallelsearch.agents.policies import ScriptedPolicy
    from parallelsearch.agents.searchers import guarded_search
    from parallelsearch.graphs import build_parallel_search_graph
    from parallelsearch.stores import RetrieverClient, create_retrieval_app

    passages, vectors = corpus
    third = ChromaServer(tmp_path / "third").start()
    try:
        live = _fill(
            ChromaStore("part-a", host="127.0.0.1", port=servers[0].port, embedder=embedder, hnsw=EXACT),
            passages[:40],
            vectors[:40],
        )
        _fill(
            ChromaStore("part-b", host="127.0.0.1", port=third.port, embedder=embedder, hnsw=EXACT),
            passages[40:80],
            vectors[40:80],
        )
        declaration = f"wiki=part-a@127.0.0.1:{servers[0].port},part-b@127.0.0.1:{third.port}"
        # deadlines far beyond any answer where answers are expected (a loaded machine answers late);
        # a short one only where the hung shard is alone, so only its silence can run it out
        strict = _sharded(declaration, embedder, shard_timeout_s=300)
        partial = _sharded(declaration, embedder, shard_timeout_s=300, allow_partial=True)
        question = hotpot_questions[0]["question"]
        assert len(strict.search(question, 3)) == 3
        alone = f"wiki=part-b@127.0.0.1:{third.port}"
        hung = _sharded(alone, embedder, shard_timeout_s=300)
        hung.timeout_s = 1
        third.proc.send_signal(signal.SIGSTOP)  # hung: the deadlines answer, naming the shard
        try:
            with pytest.raises(
                ShardError, match=rf"shard part-b@127.0.0.1:{third.port}: timed out after 1 s"
            ):
                hung.search_batch([question], 3)
            with pytest.raises(
                ShardError, match=rf"part-b@127.0.0.1:{third.port} .*cannot be opened: TimeoutError"
            ):
                _sharded(alone, embedder, shard_timeout_s=1)
        finally:
            third.proc.send_signal(signal.SIGCONT)
        third.stop()
        with pytest.raises(ShardError, match=rf"shard part-b@127.0.0.1:{third.port}: .*allow_partial"):
            strict.search_batch([question], 3)
        hits = partial.search_batch([question], 3)[0]
        assert [p.id for p in hits] == [p.id for p in live.search(question, 3)]
        assert list(hits.missing) == [f"part-b@127.0.0.1:{third.port}"]
        assert f"part-b@127.0.0.1:{third.port}" in hits.note and hits[:2].missing == hits.missing
        with UvicornThread(create_retrieval_app(partial)) as srv:  # /retrieve says so, its client too
            body = httpx.post(
                f"{srv.url}/retrieve", json={"queries": [question], "topk": 3}, timeout=30
            ).json()
            remote = RetrieverClient(srv.url).search_batch([question], 3)[0]
        assert list(body["missing_shards"]) == [f"part-b@127.0.0.1:{third.port}"]
        assert [p.id for p in remote] == [p.id for p in hits] and remote.missing == body["missing_shards"]
        plan = [
            "<search> Scott Derrickson nationality ## Ed Wood nationality </search>",
            "<answer> yes </answer>",
        ]
        out = asyncio.run(
            build_parallel_search_graph(ScriptedPolicy(plan), partial).ainvoke({"question": question})
        )
        rows = [s for s in out["trajectory"] if s["type"] == "observation"][0]["results"]
        assert out["errors"] == 0 and all("part-b" in row["note"] and row["passages"] for row in rows)
        outcome = asyncio.run(guarded_search(partial, question, 3))
        assert outcome.error is None and outcome.note and "part-b" in outcome.note
        strict_outcome = asyncio.run(guarded_search(strict, question, 3, retries=0))
        assert strict_outcome.passages == [] and "part-b" in strict_outcome.error
    finally:
        third.stop()


def test_store_declarations_parse_and_settings_keep_them():
    spec = parse_store("wiki=wiki-0@10.0.0.1:8001, wiki-1@/data/chroma-1,wiki-2")
    assert spec.name == "wiki" and spec.sharded
    assert spec.shards == (
        ShardSpec("wiki-0", host="10.0.0.1", port=8001),
        ShardSpec("wiki-1", path=Path("/data/chroma-1")),
        ShardSpec("wiki-2"),
    )
    assert not parse_store("plain").sharded
    for bad, said in (
        ("wiki=", "declares no shards"),
        ("wiki=wiki-0@host:port", "neither HOST:PORT nor a folder"),
        ("wiki=wiki-0@h:1,wiki-0@h:1", "more than once"),
        ("wiki=x", "store name 'x' is invalid"),
    ):
        with pytest.raises(ValueError, match=said):
            parse_store(bad)
    # the comma form of PARALLELSEARCH_STORES keeps a declaration's shards together
    cfg = RetrievalConfig(stores="notes,wiki=wiki-0@h:1,wiki-1@h:2")  # type: ignore[arg-type]
    assert cfg.stores == ["notes", "wiki=wiki-0@h:1,wiki-1@h:2"]
    assert cfg.store_spec("wiki").shards[1] == ShardSpec("wiki-1", host="h", port=2)
    assert find_store(cfg.stores, "notes").shards == ()
    with pytest.raises(ValueError, match="wiki=wiki-0@h:x"):
        RetrievalConfig(stores=["wiki=wiki-0@h:x"])


def test_cli_store_name_keeps_the_settings_declaration(monkeypatch):
    import argparse

    from parallelsearch.cli.common import settings_from_args

    monkeypatch.setenv("PARALLELSEARCH_STORES", '["wiki=wiki-0@127.0.0.1:8001,wiki-1@127.0.0.1:8002"]')
    s = settings_from_args(argparse.Namespace(store=["wiki"], allow_partial=True, shard_timeout=3.0))
    assert s.stores == ["wiki=wiki-0@127.0.0.1:8001,wiki-1@127.0.0.1:8002"]
    assert s.allow_partial is True and s.shard_timeout_s == 3.0


def test_merge_by_distance_breaks_ties_by_id_and_counts_an_id_once():
    a = [Passage("b", "", "", 0.9), Passage("d", "", "", 0.5)]
    b = [Passage("a", "", "", 0.9), Passage("b", "", "", 0.7), Passage("c", "", "", 0.6)]
    assert [p.id for p in merge_by_distance([a, b], 3, "s")] == ["a", "b", "c"]
    assert ShardHits([Passage("a", "", "")], {"x": "down"})[:1].missing == {"x": "down"}


def test_shard_i_of_n_covers_every_row_once():
    from parallelsearch.stores.ingestion.vectors import shard_rows

    assert [shard_rows(f"{i}/3", 10) for i in range(3)] == [(0, 3), (3, 6), (6, 10)]
    assert shard_rows("0/1", 7) == (0, 7) and shard_rows("4/8", 3) == (1, 1)
    for bad in ("3/3", "1", "a/b", "0/0", "-1/2"):
        with pytest.raises(ValueError, match="--shard"):
            shard_rows(bad, 10)


def test_index_rows_builds_text_shards(tmp_path, embedder):
    """``index --rows`` on a text corpus: two row ranges make two shards that hold the corpus once."""
    corpus = RAW / "wiki_corpus/PeterGriffinJin_Search-R1/corpus.jsonl"
    first = ChromaStore("rows-0", path=tmp_path / "s0", embedder=embedder)
    second = ChromaStore("rows-1", path=tmp_path / "s1", embedder=embedder)
    assert ingest(first, [corpus], rows=(0, 4), progress=False).added == 4
    assert ingest(second, [corpus], rows=(4, None), progress=False).added == 6
    assert ingest(second, [corpus], rows=(4, None), progress=False).added == 0  # resumable: nothing twice
    ids = set(first.collection.get(include=[])["ids"]) | set(second.collection.get(include=[])["ids"])
    assert len(ids) == 10
    with pytest.raises(ValueError, match="not a range"):
        ingest(first, [corpus], rows=(5, 2), progress=False)


@pytest.mark.slow
def test_documented_parallel_build_then_search_as_one(tmp_path):
    """docs/scaling.md's loop, for real: two `index --shard I/2` processes at once, each into its own
    folder under its own writer lock, then the folders searched as one (resuming: test_index_rows...)."""
    import json

    corpus = RAW / "wiki_corpus/PeterGriffinJin_Search-R1/corpus.jsonl"
    exe = os.path.join(os.path.dirname(sys.executable), "parallelsearch")
    base = {**os.environ, "PARALLELSEARCH_ENCODER_BACKEND": "torch"}

    def index(i: int) -> subprocess.Popen:
        env = {**base, "PARALLELSEARCH_CHROMA_PATH": str(tmp_path / f"shard-{i}")}
        cmd = [
            exe,
            "index",
            "--store",
            f"wiki-{i}",
            "--no-progress",
            "--shard",
            f"{i}/2",
            str(corpus),
        ]
        return subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    procs = [index(i) for i in range(2)]
    outs = [p.communicate(timeout=300)[0] for p in procs]
    assert all(p.returncode == 0 and "added 5," in out for p, out in zip(procs, outs, strict=True)), outs
    decl = f"wiki=wiki-0@{tmp_path / 'shard-0'},wiki-1@{tmp_path / 'shard-1'}"
    done = subprocess.run(
        [exe, "search", "--store", decl, "--json", "-k", "10", "lobbyist for Genentech"],
        env=base,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    hits = json.loads(done.stdout)
    assert len(hits) == 10 and hits[0]["title"] == "Evan Morris" and {h["store"] for h in hits} == {"wiki"}
