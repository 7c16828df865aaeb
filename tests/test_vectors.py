"""Ingestion from precomputed vectors (npy, npz, FAISS flat), resume, mismatch errors, and
Chroma's HNSW parameters per store. Real Chroma; the vectors are random (no model needed)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from parallelsearch.stores import ChromaStore, describe_collections, make_client
from parallelsearch.stores.errors import BadInputError, ModelMismatchError
from parallelsearch.stores.ingestion.vector_files import open_vectors
from parallelsearch.stores.ingestion.vectors import RecordedModel, ingest_vectors

N, DIM = 230, 16


def _corpus(path: Path, n: int = N) -> Path:
    with path.open("w") as f:
        for i in range(n):
            f.write(json.dumps({"id": f"doc{i}", "contents": f'"Title {i}"\npassage number {i}'}) + "\n")
            if i == 5:
                f.write("\n")  # blank lines are not passages
    return path


@pytest.fixture()
def data(tmp_path):
    rng = np.random.default_rng(7)
    vecs = rng.standard_normal((N, DIM)).astype(np.float32)
    np.save(tmp_path / "v.npy", vecs)
    np.savez_compressed(tmp_path / "v.npz", emb=vecs)
    np.savez(tmp_path / "two.npz", emb=vecs, other=vecs[:3])
    return vecs, _corpus(tmp_path / "corpus.jsonl")


def _store(tmp_path, name="vecs", dim=DIM, **kw) -> ChromaStore:
    return ChromaStore(name, path=tmp_path / "db", embedder=RecordedModel("e5-test", dim), **kw)


def _check_contents(store: ChromaStore, vecs: np.ndarray) -> None:
    assert store.count() == N
    got = store.collection.get(ids=["doc0", "doc7", f"doc{N - 1}"], include=["embeddings", "documents"])
    by_id = dict(zip(got["ids"], got["embeddings"], strict=True))
    for i in (0, 7, N - 1):
        np.testing.assert_allclose(by_id[f"doc{i}"], vecs[i], rtol=1e-6)
    hits = store.search_vectors(vecs[[3, 100]], 1)
    assert [h[0].id for h in hits] == ["doc3", "doc100"]
    assert hits[0][0].title == "Title 3" and hits[0][0].text == "passage number 3"
    info = store.info()
    assert (info["model"], info["dimension"]) == ("e5-test", DIM)


@pytest.mark.parametrize("name", ["v.npy", "v.npz"])
def test_numpy_vectors_are_stored_row_by_row_in_chunks(tmp_path, data, name):
    vecs, corpus = data
    store = _store(tmp_path)
    rep = ingest_vectors(store, corpus, tmp_path / name, chunk_size=50, progress=False)
    assert (rep.added, rep.already_present) == (N, 0)
    _check_contents(store, vecs)


def test_npz_with_several_arrays_needs_a_key(tmp_path, data):
    vecs, corpus = data
    with pytest.raises(BadInputError, match=r"two\.npz.*holds 2 arrays.*--vectors-key"):
        open_vectors(tmp_path / "two.npz")
    store = _store(tmp_path)
    ingest_vectors(store, corpus, tmp_path / "two.npz", key="emb", chunk_size=64, progress=False)
    _check_contents(store, vecs)


def test_faiss_flat_index_is_read_in_chunks(tmp_path, data):
    faiss = pytest.importorskip("faiss", reason="faiss-cpu is the optional [faiss] extra")
    vecs, corpus = data
    index = faiss.IndexFlatIP(DIM)
    index.add(vecs)
    faiss.write_index(index, str(tmp_path / "flat.faiss"))
    store = _store(tmp_path)
    ingest_vectors(store, corpus, tmp_path / "flat.faiss", chunk_size=40, progress=False)
    _check_contents(store, vecs)
    # an index that does not keep the vectors exactly is refused, naming the file
    quant = faiss.IndexFlatL2(DIM)
    ivf = faiss.IndexIVFFlat(quant, DIM, 4)
    ivf.train(vecs)
    ivf.add(vecs)
    faiss.write_index(ivf, str(tmp_path / "ivf.index"))
    with pytest.raises(BadInputError, match=r"ivf\.index.*IndexIVFFlat, not a flat index"):
        open_vectors(tmp_path / "ivf.index")


class _Interrupted(RuntimeError):
    pass


class _DiesAfter:
    """The .npy reader, killed (an exception) when the third chunk is read."""

    def __init__(self, path: Path, chunks: int) -> None:
        self._inner = open_vectors(path)
        self.path, self.count, self.dimension = self._inner.path, self._inner.count, self._inner.dimension
        self.left = chunks

    def rows(self, start: int, stop: int) -> np.ndarray:
        if self.left == 0:
            raise _Interrupted("killed")
        self.left -= 1
        return self._inner.rows(start, stop)

    def close(self) -> None:
        self._inner.close()


def test_an_interrupted_ingestion_resumes_where_it_stopped(tmp_path, data):
    vecs, corpus = data
    store = _store(tmp_path)
    with pytest.raises(_Interrupted):
        ingest_vectors(store, corpus, _DiesAfter(tmp_path / "v.npy", 2), chunk_size=50, progress=False)
    assert store.count() == 100  # two committed chunks
    # a new process, a new handle: the rest is added, nothing twice
    again = _store(tmp_path)
    rep = ingest_vectors(again, corpus, tmp_path / "v.npy", chunk_size=50, progress=False)
    assert (rep.already_present, rep.added) == (100, N - 100)
    _check_contents(again, vecs)
    rep = ingest_vectors(again, corpus, tmp_path / "v.npy", chunk_size=50, progress=False)
    assert (rep.already_present, rep.added) == (N, 0)


def test_dimension_and_count_mismatches_name_the_file(tmp_path, data):
    vecs, corpus = data
    store = _store(tmp_path, dim=DIM + 1)
    with pytest.raises(BadInputError, match=r"v\.npy: vectors have dimension 16, but store 'vecs' takes"):
        ingest_vectors(store, corpus, tmp_path / "v.npy", progress=False)
    short = _corpus(tmp_path / "short.jsonl", N - 30)
    with pytest.raises(
        BadInputError, match=rf"v\.npy: holds {N} vectors but the corpus .*short\.jsonl holds {N - 30}"
    ):
        ingest_vectors(_store(tmp_path, "other"), short, tmp_path / "v.npy", progress=False)
    np.save(tmp_path / "flat.npy", vecs[:, 0])
    with pytest.raises(BadInputError, match=r"flat\.npy: vectors must be a 2-d array"):
        open_vectors(tmp_path / "flat.npy")
    # a store built from these vectors records their model: a query encoder of another model is refused
    ingest_vectors(_store(tmp_path, "built"), corpus, tmp_path / "v.npy", progress=False)
    with pytest.raises(ModelMismatchError, match="built with embedding model 'e5-test'"):
        ChromaStore(
            "built", path=tmp_path / "db", embedder=RecordedModel("all-MiniLM-L6-v2", 384), create=False
        )


def test_a_corpus_line_with_several_passages_is_an_error_naming_the_line(tmp_path, data):
    vecs, _ = data
    bad = tmp_path / "bad.jsonl"
    lines = [json.dumps({"id": str(i), "title": "t", "text": f"x{i}"}) for i in range(N)]
    lines[9] = json.dumps({"context": [["a", ["one"]], ["b", ["two"]]]})
    bad.write_text("\n".join(lines) + "\n")
    with pytest.raises(BadInputError, match=r"bad\.jsonl:10: record holds 2 passages"):
        ingest_vectors(_store(tmp_path), bad, tmp_path / "v.npy", progress=False)


def _cli(args: list[str], home: Path) -> subprocess.CompletedProcess:
    import os

    env = dict(os.environ, PARALLELSEARCH_HOME=str(home))
    return subprocess.run(
        [sys.executable, "-m", "parallelsearch.cli", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.slow
def test_cli_index_vectors_hnsw_parameters_and_stores(tmp_path, data):
    vecs, corpus = data
    home = tmp_path / "home"
    r = _cli(
        ["index", "--store", "pre", "--model", "e5-test", "--vectors", str(tmp_path / "v.npz"), str(corpus),
         "--ef-search", "33", "--max-neighbors", "24", "--ef-construction", "150", "--no-progress"],
        home,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert f"added {N} vectors of {DIM} dimensions (e5-test)" in r.stdout
    # the parameters reached Chroma: a fresh client reads them from the collection's configuration
    hnsw = make_client(home / "chroma").get_collection("pre").configuration["hnsw"]
    assert (hnsw["ef_search"], hnsw["max_neighbors"], hnsw["ef_construction"]) == (33, 24, 150)
    r = _cli(["stores", "--store", "pre", "--set-ef-search", "77"], home)
    assert r.returncode == 0, r.stderr
    assert "max_neighbors=24" in r.stdout and "ef_search=77" in r.stdout
    rows = {row["name"]: row for row in describe_collections(make_client(home / "chroma"))}
    assert rows["pre"]["hnsw"]["ef_search"] == 77
    # creation-only parameters cannot change
    r = _cli(["index", "--store", "pre", "--model", "e5-test", "--vectors", str(tmp_path / "v.npy"), str(corpus),
              "--max-neighbors", "32", "--no-progress"], home)  # fmt: skip
    assert r.returncode == 2 and "max_neighbors=32 (store has 24)" in r.stderr
    # count mismatch: exit 2, the file named, and no empty store left behind
    short = _corpus(tmp_path / "short.jsonl", 10)
    r = _cli(["index", "--store", "fresh", "--vectors", str(tmp_path / "v.npy"), str(short)], home)
    assert r.returncode == 2 and "v.npy: holds 230 vectors" in r.stderr
    assert "fresh" not in {row["name"] for row in describe_collections(make_client(home / "chroma"))}


def test_hnsw_parameters_are_validated(tmp_path):
    with pytest.raises(ValueError, match="HNSW ef_search must be a positive integer"):
        _store(tmp_path, hnsw={"ef_search": 0})
    with pytest.raises(ValueError, match="space 'l2' is not supported"):
        _store(tmp_path, hnsw={"space": "l2"})
    store = _store(tmp_path, hnsw={"space": "ip", "ef_search": 20})
    assert store.info()["hnsw"]["space"] == "ip"
    assert _store(tmp_path, hnsw={"ef_search": 40}).info()["hnsw"]["ef_search"] == 40


def test_row_ranges_make_shards_that_together_hold_the_corpus(tmp_path, data):
    vecs, corpus = data
    a, b = _store(tmp_path, "shard-a"), _store(tmp_path, "shard-b")
    ingest_vectors(a, corpus, tmp_path / "v.npy", rows=(0, 100), chunk_size=30, progress=False)
    ingest_vectors(b, corpus, tmp_path / "v.npy", rows=(100, None), chunk_size=30, progress=False)
    assert (a.count(), b.count()) == (100, N - 100)
    assert b.search_vectors(vecs[[150]], 1)[0][0].id == "doc150"
    assert a.existing_ids(["doc99", "doc100"]) == {"doc99"}
    with pytest.raises(BadInputError, match=r"v\.npy: row range 0:999 is not within its 230 rows"):
        ingest_vectors(a, corpus, tmp_path / "v.npy", rows=(0, 999), progress=False)
