"""``ParallelSearchEmbeddings``: the packaged MiniLM as a LangChain ``Embeddings``. A user's
``InMemoryVectorStore`` built with it is searched through ``create_parallel_search_agent`` with a
tool-calling chat model (the scripted stand-in), and it embeds exactly as a real Chroma store of
the same configuration does, with that store's encoder instance.
"""

from __future__ import annotations

import numpy as np
import pytest
from langchain_core.documents import Document
from langchain_core.vectorstores import InMemoryVectorStore

from parallelsearch import ParallelSearchEmbeddings, ScriptedToolChatModel, create_parallel_search_agent
from parallelsearch.demo_data import HOTPOTQA_SAMPLE
from parallelsearch.graphs.factory import make_store
from parallelsearch.stores import RetrievalConfig
from parallelsearch.stores.ingestion.readers import read_passages

#: torch: the same fp32 embeddings as ONNX, without an export in this test
TORCH = {"encoder_backend": "torch"}


@pytest.fixture(scope="module")
def documents(tmp_path_factory):
    lines = HOTPOTQA_SAMPLE.read_text(encoding="utf-8").splitlines()[:4]
    path = tmp_path_factory.mktemp("sample") / "sample.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    seen: dict[str, Document] = {}
    for p in read_passages([path]):
        seen.setdefault(p.id, Document(page_content=p.text, metadata={"title": p.title}, id=p.id))
    return list(seen.values())


def test_an_in_memory_vector_store_through_the_front_door(documents):
    embeddings = ParallelSearchEmbeddings(config=RetrievalConfig(**TORCH))
    assert embeddings._embedder is None  # nothing loads before the first embedding
    vs = InMemoryVectorStore(embedding=embeddings)
    vs.add_documents(documents)
    model = ScriptedToolChatModel(turns=[["Greyia", "Calibanus"], "Greyia"])
    agent = create_parallel_search_agent(model, vs, top_k=2)
    out = agent.invoke({"question": "Between Greyia and Calibanus, which has more species?"})
    assert out["answer"] == "Greyia" and out["errors"] == 0 and out["protocol"] == "tools"
    assert (out["search_rounds"], out["subqueries"], out["passages"]) == (1, 2, 4)
    obs = [s for s in out["trajectory"] if s["type"] == "observation"][0]["results"]
    assert [r["passages"][0]["title"] for r in obs] == ["Greyia", "Calibanus"]
    assert {p["store"] for r in obs for p in r["passages"]} == {"InMemoryVectorStore"}


def test_it_embeds_as_a_store_of_the_same_configuration_with_its_encoder(tmp_path):
    cfg = RetrievalConfig(chroma_path=tmp_path / "chroma", query_prefix="query: ", **TORCH)
    store = make_store(cfg, "prefixed", create=True)
    embeddings = ParallelSearchEmbeddings(config=cfg)
    assert embeddings.embedder is store.embedder  # one encoder per configuration
    texts = ["Greyia is a genus of plants.", "Calibanus is a genus of flowering plants."]
    np.testing.assert_array_equal(np.asarray(embeddings.embed_documents(texts), dtype=np.float32),
                                  store.embedder.encode_passages(texts))  # fmt: skip
    query = embeddings.embed_query("Which genus has more species?")
    np.testing.assert_array_equal(
        np.asarray(query, dtype=np.float32),
        store.embedder.encode_queries(["Which genus has more species?"])[0],
    )
    # the prefix is the configuration's: the same query without it is another vector
    plain = ParallelSearchEmbeddings(config=RetrievalConfig(**TORCH))
    assert plain.embedder is not store.embedder
    assert not np.allclose(plain.embed_query("Which genus has more species?"), query, atol=1e-4)
    assert len(query) == store.embedder.dimension == 384
    assert abs(float(np.linalg.norm(query)) - 1.0) < 1e-5


def test_an_embedder_given_is_used_and_mixed_arguments_are_refused(embedder):
    emb = ParallelSearchEmbeddings(embedder=embedder)
    assert emb.embedder is embedder and "all-MiniLM-L6-v2" in repr(emb)
    with pytest.raises(TypeError, match="pass an embedder, or a model and/or a config"):
        ParallelSearchEmbeddings("other-model", embedder=embedder)
