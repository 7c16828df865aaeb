"""The FAISS store on the paper's own layout (``e5_Flat.index`` + ``wiki-18.jsonl``, no manifest)
written here by FAISS itself, and what it refuses: a corpus that is not the index's pair, another
model's dimension, a file that is no index; an append cut between its corpus lines and its vectors."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

faiss = pytest.importorskip(
    "faiss", reason="faiss-cpu is in the main tier's environment (.venv), not the vLLM tier's"
)

from parallelsearch.settings import Settings  # noqa: E402
from parallelsearch.stores.errors import ModelMismatchError, StoreNotFoundError  # noqa: E402
from parallelsearch.stores.faiss_store import (  # noqa: E402
    FaissStore,
    find_files,
    open_faiss_store,
    writing_faiss_store,
)
from parallelsearch.stores.passages import Passage, to_contents  # noqa: E402
from parallelsearch.stores.store_files import StoreDamagedError  # noqa: E402

TITLES = ["Ed Wood", "Scott Derrickson", "Doctor Strange", "Sinister", "Plan 9 from Outer Space"]


def _paper_layout(folder: Path, embedder, rows: int = len(TITLES)) -> list[Passage]:
    """A Search-R1 corpus and its flat inner-product index as FAISS writes them, under the paper's names."""
    folder.mkdir(parents=True)
    passages = [Passage(str(i), t, f"{t} is a passage about {t.lower()}.") for i, t in enumerate(TITLES)]
    with (folder / "wiki-18.jsonl").open("w") as f:
        for p in passages:
            f.write(json.dumps({"id": p.id, "contents": to_contents(p.title, p.text)}) + "\n")
    index = faiss.IndexFlatIP(embedder.dimension)
    index.add(np.asarray(embedder.encode_passages([p.text for p in passages[:rows]]), dtype=np.float32))
    faiss.write_index(index, str(folder / "e5_Flat.index"))
    return passages


def _cfg(tmp_path: Path):
    return Settings(home=tmp_path / "home", store_kind="faiss", store_path=tmp_path / "faiss").retrieval()


def test_the_paper_layout_opens_as_is_memory_mapped(tmp_path, embedder):
    passages = _paper_layout(tmp_path / "faiss" / "wiki-18", embedder)
    store = open_faiss_store(_cfg(tmp_path), "wiki-18", embedder=embedder)
    assert store.count() == len(TITLES) and not (store.files.folder / "store.json").exists()
    hits = store.search_batch([p.text for p in passages], 1)
    assert [h[0].id for h in hits] == [p.id for p in passages]  # each passage finds itself
    assert hits[1][0].title == "Scott Derrickson" and hits[1][0].store == "wiki-18"
    exact = (
        np.asarray(embedder.encode_passages([p.text for p in passages]))
        @ embedder.encode_queries(["Sinister"])[0]
    )
    assert [p.id for p in store.search("Sinister", 5)] == [str(i) for i in np.argsort(-exact, kind="stable")]
    with pytest.raises(ValueError, match="opened for reading"):  # FAISS would abort the process
        store.upsert([Passage("new", "t", "x")], np.zeros((1, embedder.dimension), dtype=np.float32))


def test_a_corpus_that_is_not_the_indexs_pair_is_refused(tmp_path, embedder):
    _paper_layout(tmp_path / "faiss" / "wiki-18", embedder, rows=4)
    with pytest.raises(StoreDamagedError, match="holds 4 vectors but the corpus .* 5 lines"):
        open_faiss_store(_cfg(tmp_path), "wiki-18", embedder=embedder)


def test_another_models_dimension_and_a_bad_file_are_refused(tmp_path, embedder):
    folder = tmp_path / "faiss" / "wiki-18"
    _paper_layout(folder, embedder)
    index = faiss.IndexFlatIP(embedder.dimension * 2)
    index.add(np.zeros((len(TITLES), embedder.dimension * 2), dtype=np.float32))
    faiss.write_index(index, str(folder / "e5_Flat.index"))
    with pytest.raises(ModelMismatchError, match=f"holds {embedder.dimension * 2}-dimensional vectors"):
        open_faiss_store(_cfg(tmp_path), "wiki-18", embedder=embedder)
    (folder / "e5_Flat.index").write_bytes(b"not an index")
    with pytest.raises(StoreDamagedError, match="is no FAISS index"):
        open_faiss_store(_cfg(tmp_path), "wiki-18", embedder=embedder)
    with pytest.raises(StoreNotFoundError, match="did you mean 'wiki-18'"):
        open_faiss_store(_cfg(tmp_path), "wiki-19", embedder=embedder)


def test_an_append_cut_before_its_vectors_resumes(tmp_path, embedder):
    """Corpus lines written without their vectors (a run killed between the two) are dropped when the
    store is next opened for writing, so a resumed ingestion adds them again, once."""
    cfg = _cfg(tmp_path)
    passages = [Passage(f"p{i}", t, f"{t} text") for i, t in enumerate(TITLES)]
    with writing_faiss_store(cfg, "cut-run", embedder=embedder) as store:
        store.upsert(passages[:3])
    files = find_files(cfg.store_path, "cut-run")
    with files.corpus.open("a") as f:  # the killed run's lines, never indexed
        f.write(json.dumps({"id": "p3", "contents": to_contents("x", "y")}) + "\n")
    with pytest.raises(StoreDamagedError):
        open_faiss_store(cfg, "cut-run", embedder=embedder)
    with writing_faiss_store(cfg, "cut-run", embedder=embedder) as store:
        assert store.count() == 3 and store.existing_ids([p.id for p in passages]) == {"p0", "p1", "p2"}
        store.upsert(passages[3:])
        with pytest.raises(ValueError, match="appends; 1 id"):
            store.upsert(passages[:1])
    reader = open_faiss_store(cfg, "cut-run", embedder=embedder)
    assert reader.count() == 5 and reader.verify().ok
    assert [reader.corpus.passage(i).id for i in range(5)] == [p.id for p in passages]


def test_a_failed_first_write_leaves_no_store(tmp_path, embedder):
    cfg = _cfg(tmp_path)
    with pytest.raises(KeyError), writing_faiss_store(cfg, "never", embedder=embedder) as store:
        store.record_budget(512)
        raise KeyError("boom")
    assert not (cfg.store_path / "never").exists()
    assert isinstance(store, FaissStore)
