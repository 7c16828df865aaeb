"""Encoder backends: ONNX Runtime fp32 matches torch, int8 keeps recall on real HotpotQA
paragraphs, the export is cached atomically, and a store refuses an encoder it was not built for."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
from conftest import needs_data

from parallelsearch.stores import ChromaStore, ModelMismatchError, ingest
from parallelsearch.stores.encoding import embedder as embedder_module
from parallelsearch.stores.encoding.embedder import Embedder, make_embedder
from parallelsearch.stores.encoding.onnx_engine import OnnxUnavailableError

QUERIES = ["Scott Derrickson", "Were Scott Derrickson and Ed Wood of the same nationality?", "Tyler Bates"]
PASSAGES = ["Ed Wood was an American filmmaker. " * 20, "short", "Woodson is a town in Arkansas."]


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("models")


@pytest.fixture(autouse=True)
def _no_gpu_visible(monkeypatch):
    """What ``auto`` picks depends on whether torch sees CUDA: these tests state the CPU case
    (a GPU host runs them too), and the GPU tests say so themselves."""
    monkeypatch.setattr("torch.cuda.is_available", lambda: False)


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
    names = [p.name for p in files]
    assert len(names) == 3 and names[2] == "source.txt", names
    assert re.fullmatch(r"model-[0-9a-f]{12}\.int8\.onnx", names[0]) and names[1] == names[0].replace(
        ".int8", ""
    )
    mtimes = [p.stat().st_mtime_ns for p in files]
    embedder_module._onnx_file.cache_clear()
    embedder_module._onnx_session.cache_clear()
    again = Embedder(backend="onnx-int8", cache_dir=cache)  # a new process would do this
    assert [p.stat().st_mtime_ns for p in files] == mtimes, "the cached export was rewritten"
    assert np.array_equal(again.encode_queries(QUERIES), int8.encode_queries(QUERIES))


def test_the_cache_keeps_one_export_per_model_that_still_exists(tmp_path):
    """Each fresh install or temporary model would otherwise leave one more export behind."""
    from parallelsearch.stores.encoding.onnx_engine import SOURCE_FILE, _model_folder, prune_cache

    cache, live_model = tmp_path / "cache", tmp_path / "live-model"
    live_model.mkdir()
    folders = {}
    for name, source in {"live": live_model, "gone": tmp_path / "deleted-model", "foreign": None}.items():
        folders[name] = cache / name
        folders[name].mkdir(parents=True)
        (folders[name] / "model-aaaaaaaaaaaa.onnx").write_bytes(b"old")
        if source is not None:
            (folders[name] / SOURCE_FILE).write_text(str(source))
    current = folders["live"] / "model-bbbbbbbbbbbb.onnx"
    current.write_bytes(b"new")
    prune_cache(cache, folders["live"], keep=(current,))
    assert sorted(p.name for p in folders["live"].iterdir()) == ["model-bbbbbbbbbbbb.onnx", SOURCE_FILE]
    assert not folders["gone"].exists(), "the folder of a model that no longer exists is removed"
    assert (folders["foreign"] / "model-aaaaaaaaaaaa.onnx").is_file(), "a folder that names no source stays"
    # a local model's folder names it; a hub name's names nothing, so it is never judged gone
    assert (_model_folder(cache, str(live_model)) / SOURCE_FILE).read_text() == str(live_model.resolve())
    assert not (_model_folder(cache, "intfloat/e5-base-v2") / SOURCE_FILE).exists()


@needs_data
def test_int8_recall_on_hotpotqa_paragraphs_stays_close_to_fp32(
    tmp_path, embedder, int8, hotpot_comparison_file, hotpot_store
):
    """20 real HotpotQA questions' paragraphs, one store per backend, one query per gold title.
    The fp32 store is the session's (the same 20 questions' paragraphs, the same encoder)."""
    recs = json.loads(hotpot_comparison_file.read_text())[:20]
    small = tmp_path / "hp.json"
    small.write_text(json.dumps(recs))
    gold = [t for r in recs for t in dict.fromkeys(r["supporting_facts"]["title"])]  # HF format
    assert hotpot_store.embedder is embedder
    int8_store = ChromaStore(f"hp-{int8.backend}", path=tmp_path / int8.backend, embedder=int8)
    ingest(int8_store, [small], progress=False)
    assert int8_store.count() == hotpot_store.count()
    recall = {}
    for emb, store in ((embedder, hotpot_store), (int8, int8_store)):
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


def test_auto_opens_each_store_with_its_embeddings_on_the_cpu_engine(tmp_path, embedder, int8, cache):
    """``auto`` keeps a store's embedding family and runs fp32 on ONNX on CPU, whichever fp32
    engine built the store; an explicit backend is obeyed."""
    from parallelsearch.graphs.factory import make_searcher, make_store
    from parallelsearch.stores import RetrievalConfig

    ChromaStore("s-torch", path=tmp_path, embedder=embedder)
    ChromaStore("s-int8", path=tmp_path, embedder=int8)
    cfg = RetrievalConfig(chroma_path=tmp_path, model_cache_dir=cache)
    assert make_store(cfg, "s-int8").embedder.backend == "onnx-int8"
    assert make_store(cfg, "s-torch").embedder.backend == "onnx"
    assert make_store(cfg, "s-new", create=True).embedder.backend == "onnx"
    multi = make_searcher(cfg.model_copy(update={"stores": ["s-torch", "s-int8"]}))
    assert {n: s.store.embedder.backend for n, s in multi.searchers.items()} == {
        "s-torch": "onnx",
        "s-int8": "onnx-int8",
    }
    explicit = cfg.model_copy(update={"encoder_backend": "torch"})
    assert make_store(explicit, "s-torch").embedder.backend == "torch"
    with pytest.raises(ModelMismatchError, match="built with the 'onnx-int8' encoder backend"):
        make_store(explicit, "s-int8")


def test_auto_backend_runs_fp32_on_torch_on_a_gpu(monkeypatch):
    from parallelsearch.stores.encoding.backend import choose_backend

    assert choose_backend("auto", None, "cpu") == "onnx"
    assert choose_backend("auto", "torch", "cpu") == "onnx"
    assert choose_backend("auto", "onnx", "cuda:1") == "torch"
    assert choose_backend("torch", "onnx-int8", "cpu") == "torch"  # an explicit engine is obeyed
    monkeypatch.setattr("torch.cuda.is_available", lambda: True)
    assert choose_backend("auto", "torch", None) == "torch"  # sentence-transformers would pick cuda
    assert choose_backend("auto") == "torch"
    with pytest.raises(
        ValueError, match="records encoder backend 'onnx-fp16', which this version does not know"
    ):
        choose_backend("auto", "onnx-fp16", "cpu")
    with pytest.raises(ValueError, match="unknown encoder backend 'onnx-fp16'"):
        choose_backend("onnx-fp16")


def test_make_embedder_on_a_gpu_device(monkeypatch, cache):
    """``index --device cuda``: auto runs torch there (same embeddings as ONNX), an explicit
    ONNX backend is refused by name, before any model is loaded."""
    from parallelsearch.stores import RetrievalConfig

    built = []
    monkeypatch.setattr(embedder_module, "get_embedder", lambda model, **kw: built.append(kw["backend"]))
    cfg = RetrievalConfig(model_cache_dir=cache)
    assert make_embedder(cfg, recorded="onnx", device="cuda") is None  # the stand-in's None
    assert built == ["torch"]
    for backend in ("onnx", "onnx-int8"):
        with pytest.raises(ValueError, match=f"encoder backend '{backend}' runs on CPU only.*'cuda:0'"):
            make_embedder(cfg.model_copy(update={"encoder_backend": backend}), device="cuda:0")
    with pytest.raises(ValueError, match="'onnx-int8' runs on CPU only.*int8 embeddings have no GPU engine"):
        make_embedder(cfg, recorded="onnx-int8", device="cuda")  # auto, but int8 has no GPU engine here
    assert built == ["torch"]


def test_auto_falls_back_to_torch_when_onnx_cannot_run_the_model(monkeypatch, caplog, tmp_path):
    from parallelsearch.stores import RetrievalConfig

    def no_export(*args):
        raise RuntimeError("this model has no ONNX export")

    monkeypatch.setattr(embedder_module, "export_onnx", no_export)
    cfg = RetrievalConfig(model_cache_dir=tmp_path)  # a cache no shared embedder was made for
    with caplog.at_level("WARNING"):
        assert make_embedder(cfg).backend == "torch"
        assert make_embedder(cfg).backend == "torch"  # a second store of the model: not tried again
    assert caplog.text.count("this model has no ONNX export") == 1, caplog.text
    assert "the onnx encoder cannot run model" in caplog.text and "using torch" in caplog.text
    with pytest.raises(OnnxUnavailableError, match="RuntimeError: this model has no ONNX export"):
        make_embedder(cfg.model_copy(update={"encoder_backend": "onnx"}))


def test_onnx_refuses_a_model_it_would_export_wrongly(monkeypatch, caplog, tmp_path):
    """A CLS-pooled model would export without error and give other embeddings: refused by
    name, and auto runs it on torch."""
    from parallelsearch.stores import RetrievalConfig
    from parallelsearch.stores.encoding.embedder import resolve_model_path
    from parallelsearch.stores.encoding.onnx_engine import pipeline_problem
    from parallelsearch.stores.encoding.torch_engine import load_model

    model = load_model(resolve_model_path("all-MiniLM-L6-v2"), "cpu").model
    assert pipeline_problem(model) is None
    monkeypatch.setattr(model[1], "pooling_mode", "cls")
    assert pipeline_problem(model) == "its pooling is 'cls', not mean"
    with caplog.at_level("WARNING"):
        assert make_embedder(RetrievalConfig(model_cache_dir=tmp_path)).backend == "torch"
    assert "its pooling is 'cls', not mean; use encoder_backend torch" in caplog.text
    assert not list(tmp_path.rglob("*.onnx")), "nothing is exported for a model the export cannot reproduce"
    with pytest.raises(OnnxUnavailableError, match="'cls'"):
        Embedder(backend="onnx", cache_dir=tmp_path / "other")


def test_onnx_fills_the_cores_with_encoder_threads_unless_told(cache, monkeypatch):
    from parallelsearch.stores import RetrievalConfig
    from parallelsearch.stores.encoding.encoder_threads import usable_cores

    cores = usable_cores()
    cfg = RetrievalConfig(model_cache_dir=cache)
    assert make_embedder(cfg.model_copy(update={"encoder_workers": 1})).workers == 1
    auto = make_embedder(cfg)
    assert (auto.backend, auto.workers) == ("onnx", cores)
    assert make_embedder(cfg.model_copy(update={"encoder_threads": cores})).workers == 1
    assert make_embedder(cfg.model_copy(update={"encoder_backend": "torch"})).workers == 1  # one team
    # the cores this process may use, not the host's: a container pinned to 2 of 64 cores
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: {0, 5})
    monkeypatch.setattr("os.cpu_count", lambda: 64)
    assert usable_cores() == 2
    assert Embedder(backend="onnx", cache_dir=cache).workers == 2
    assert Embedder(backend="onnx", cache_dir=cache, threads=2).workers == 1


def test_onnx_passages_split_over_encoder_threads_match_one_call(cache):
    """Passages dealt out by length to 2 and 3 encoder threads come back in order, equal to one call."""
    texts = [PASSAGES[i % 3] + f" {i}" * (7 * i % 5) for i in range(11)]
    one = Embedder(backend="onnx", cache_dir=cache, workers=1).encode_passages(texts, batch_size=4)
    for workers in (2, 3):
        onnx = Embedder(backend="onnx", cache_dir=cache, workers=workers)
        assert np.abs(onnx.encode_passages(texts, batch_size=4) - one).max() < 1e-5
        assert onnx.calls == 1
    # each encoder thread gets every n-th passage in order of length: parts of equal work
    parts = []
    real = onnx._threads.run_parts
    onnx._threads.run_parts = lambda fn, ps: parts.extend(ps) or real(fn, ps)
    onnx.encode_passages(texts, batch_size=4)
    by_length = sorted(texts, key=len)
    assert parts == [by_length[i::3] for i in range(3)]


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
