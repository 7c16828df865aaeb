"""Corpus readers, embedders, Chroma stores, ingestion and the Search-R1 ``/retrieve`` server.
Names resolve lazily, so importing a light module does not import Chroma, torch or FastAPI."""

from __future__ import annotations

import importlib
from typing import Any

_LAZY = {
    "DEFAULT_MODEL": "parallelsearch.stores.encoding.embedder",
    "Embedder": "parallelsearch.stores.encoding.embedder",
    "get_embedder": "parallelsearch.stores.encoding.embedder",
    "BadInputError": "parallelsearch.stores.errors",
    "ModelMismatchError": "parallelsearch.stores.errors",
    "StoreNotFoundError": "parallelsearch.stores.errors",
    "ChromaStore": "parallelsearch.stores.chroma_store",
    "list_stores": "parallelsearch.stores.chroma_store",
    "make_client": "parallelsearch.stores.chroma_store",
    "ShardedStore": "parallelsearch.stores.sharded_store",
    "ShardError": "parallelsearch.stores.sharded_store",
    "ShardHits": "parallelsearch.stores.sharded_store",
    "parse_store": "parallelsearch.stores.shard_spec",
    "SkipReport": "parallelsearch.stores.ingestion.jsonfiles",
    "iter_json_records": "parallelsearch.stores.ingestion.jsonfiles",
    "Passage": "parallelsearch.stores.passages",
    "passage_id": "parallelsearch.stores.passages",
    "split_contents": "parallelsearch.stores.passages",
    "to_contents": "parallelsearch.stores.passages",
    "read_passages": "parallelsearch.stores.ingestion.readers",
    "IngestReport": "parallelsearch.stores.ingestion.pipeline",
    "ingest": "parallelsearch.stores.ingestion.pipeline",
    "RetrievalConfig": "parallelsearch.stores.config",
    "RetrieverClient": "parallelsearch.stores.http.retrieval_client",
    "RetrieverError": "parallelsearch.stores.http.retrieval_client",
    "RetrieverAuthError": "parallelsearch.stores.http.retrieval_client",
    "create_retrieval_app": "parallelsearch.stores.http.retrieval_server",
    "run_server": "parallelsearch.stores.http.retrieval_server",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'parallelsearch.stores' has no attribute {name!r}")


__all__ = sorted(_LAZY)
