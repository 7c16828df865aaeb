"""Encoder backends: ONNX Runtime fp32 matches torch, int8 keeps recall on real HotpotQA
paragraphs, the export is cached atomically, and a store refuses an encoder it was not built for."""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import needs_data

from parallelsearch.stores import ChromaStore, ModelMismatchError, ingest
from parallelsearch.stores.embedders import Embedder

QUERIES = ["Scott Derrickson", "Were Scott Derrickson and Ed Wood of the same nationality?", "Tyler Bates"]
PASSAGES = ["Ed Wood was an American filmmaker. " * 20, "short", "Woodson is a town in Arkansas."]


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("models")


@pytest.fixture(scope="module")
def int8(cache):
    return Embedder(backend="onnx-int8", cache_dir=cache)


def test_onnx_fp32_embeddings_match_torch(embedder, cache):
    onnx = Embedder(backend="onnx", cache_dir=cache)
    assert onnx.backend == "onnx" and onnx.dimension == embedder.dimension
    assert np.abs(onnx.encode_queries(QUERIES) - embedder.encode_queries(QUERIES)).max() < 1e-5
    assert np.abs(onnx.encode_passages(PASSAGES) - embedder.encode_passages(PASSAGES)).max() < 1e-5


def test_the_export_is_cached_and_leaves_no_temporary_files(int8, cache):
    files = sorted(p for p in cache.rglob("*") if p.is_file())
    assert [p.name for p in files] == ["model.int8.onnx", "model.onnx"]
    mtimes = [p.stat().st_mtime_ns for p in files]
    from parallelsearch.stores.embedders import _load_onnx

    _load_onnx.cache_clear()
    again = Embedder(backend="onnx-int8", cache_dir=cache)  # a new process would do this
    assert [p.stat().st_mtime_ns for p in files] == mtimes, "the cached export was rewritten"
    assert np.array_equal(again.encode_queries(QUERIES), int8.encode_queries(QUERIES))


@needs_data
def test_int8_recall_on_hotpotqa_paragraphs_stays_close_to_fp32(
    tmp_path, embedder, int8, hotpot_comparison_file
):
    """20 real HotpotQA questions' paragraphs, one store per backend, one query per gold title."""
    recs = json.loads(hotpot_comparison_file.read_text())[:20]
    small = tmp_path / "hp.json"
    small.write_text(json.dumps(recs))
    gold = [t for r in recs for t in dict.fromkeys(r["supporting_facts"]["title"])]  # HF format
    recall = {}
    for emb in (embedder, int8):
        store = ChromaStore(f"hp-{emb.backend}", path=tmp_path / emb.backend, embedder=emb)
        ingest(store, [small], progress=False)
        hits = store.search_batch(gold, 3)
        recall[emb.backend] = sum(t in {p.title for p in h} for t, h in zip(gold, hits, strict=True)) / len(
            gold
        )
    assert recall["torch"] >= 0.9
    assert recall["onnx-int8"] >= recall["torch"] - 0.05, recall


def test_a_store_refuses_an_encoder_it_was_not_built_for(tmp_path, embedder, int8, cache):
    built = ChromaStore("built-torch", path=tmp_path, embedder=embedder)
    built.upsert([], None)
    with pytest.raises(ModelMismatchError) as e:
        ChromaStore("built-torch", path=tmp_path, embedder=int8, create=False)
    assert "'torch' encoder backend" in str(e.value) and "opened with 'onnx-int8'" in str(e.value)
    # ONNX fp32 computes the same embeddings: allowed
    ChromaStore(
        "built-torch", path=tmp_path, embedder=Embedder(backend="onnx", cache_dir=cache), create=False
    )
    ChromaStore("built-int8", path=tmp_path, embedder=int8)
    with pytest.raises(ModelMismatchError, match="'onnx-int8' encoder backend"):
        ChromaStore("built-int8", path=tmp_path, embedder=embedder, create=False)


def test_auto_opens_each_store_with_the_backend_it_records(tmp_path, embedder, int8, cache):
    from parallelsearch.graphs.factory import make_searcher, make_store
    from parallelsearch.stores import RetrievalConfig

    ChromaStore("s-torch", path=tmp_path, embedder=embedder)
    ChromaStore("s-int8", path=tmp_path, embedder=int8)
    cfg = RetrievalConfig(chroma_path=tmp_path, model_cache_dir=cache)
    assert make_store(cfg, "s-int8").embedder.backend == "onnx-int8"
    assert make_store(cfg, "s-torch").embedder.backend == "torch"
    multi = make_searcher(cfg.model_copy(update={"stores": ["s-torch", "s-int8"]}))
    assert {n: s.store.embedder.backend for n, s in multi.searchers.items()} == {
        "s-torch": "torch",
        "s-int8": "onnx-int8",
    }
    explicit = cfg.model_copy(update={"encoder_backend": "torch"})
    with pytest.raises(ModelMismatchError, match="built with the 'onnx-int8' encoder backend"):
        make_store(explicit, "s-int8")


def test_index_adds_to_a_store_with_the_backend_it_records(tmp_path, monkeypatch, capsys, int8, cache):
    """``index`` without --encoder-backend into an int8 store encodes with int8 (auto), where it
    used to open the store with torch and fail on the mismatch."""
    from parallelsearch.cli import main
    from parallelsearch.graphs.factory import make_store
    from parallelsearch.stores import RetrievalConfig

    chroma = tmp_path / "home" / "chroma"
    monkeypatch.setenv("PARALLELSEARCH_MODEL_CACHE_DIR", str(cache))
    ChromaStore("s-int8", path=chroma, embedder=int8)
    corpus = tmp_path / "more.jsonl"
    corpus.write_text(json.dumps({"title": "Woodson", "text": PASSAGES[2]}) + "\n", encoding="utf-8")
    assert main(["index", "--store", "s-int8", "--no-progress", str(corpus)]) == 0, capsys.readouterr().err
    assert "added 1" in capsys.readouterr().out
    store = make_store(RetrievalConfig(chroma_path=chroma, model_cache_dir=cache), "s-int8")
    assert store.embedder.backend == "onnx-int8"
    assert store.search("a town in Arkansas", 1)[0].title == "Woodson"
    assert (
        main(["index", "--store", "s-int8", "--encoder-backend", "torch", "--no-progress", str(corpus)]) == 2
    )
    assert "built with the 'onnx-int8' encoder backend" in capsys.readouterr().err
