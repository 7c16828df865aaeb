"""Text ingestion on sentence-transformers' multi-process pool: 2 CPU worker processes here
(the same code runs one worker per GPU with --device cuda --processes N); the embeddings
must equal one process's. Real model, real passages, real Chroma."""

from __future__ import annotations

import numpy as np
import pytest

from parallelsearch.stores import ChromaStore, ingest, read_passages
from parallelsearch.stores.encoding.passage_pool import PassagePool, device_list


def test_device_list_reads_device_and_processes():
    assert device_list(None, None) is None
    assert device_list("cuda", None) is None  # one device: the plain embedder runs there
    assert device_list("cpu", 2) == ["cpu", "cpu"]
    assert device_list("cuda", 3) == ["cuda:0", "cuda:1", "cuda:2"]
    assert device_list("cuda:0,cuda:1", None) == ["cuda:0", "cuda:1"]
    with pytest.raises(ValueError, match="contradicts the 2 devices"):
        device_list("cuda:0,cuda:1", 3)
    with pytest.raises(ValueError, match="--processes must be >= 1"):
        device_list("cpu", 0)


@pytest.mark.slow
def test_two_process_pool_ingests_the_same_embeddings_as_one_process(
    tmp_path, embedder, hotpot_comparison_file
):
    """16 real paragraphs in two chunks of 8: what the pool does is the same for 16 as for
    thousands (each chunk split over both workers); the workers' start is most of the cost."""
    passages = list({p.id: p for p in read_passages([hotpot_comparison_file])}.values())[:16]
    single = embedder.encode_passages([p.text for p in passages], batch_size=4)
    store = ChromaStore("pooled", path=tmp_path / "db", embedder=embedder)
    calls = embedder.calls
    with PassagePool(embedder, ["cpu", "cpu"]) as pool:
        rep = ingest(store, passages=passages, batch_size=4, chunk_size=8, encoder=pool, progress=False)
        assert pool.calls == 2  # two chunks, each split over the two workers
    assert rep.added == len(passages)
    got = store.collection.get(ids=[p.id for p in passages], include=["embeddings"])
    stored = dict(zip(got["ids"], got["embeddings"], strict=True))
    pooled = np.stack([stored[p.id] for p in passages])
    np.testing.assert_allclose(pooled, single, atol=1e-5)
    assert embedder.calls == calls  # the workers encoded, not this process
