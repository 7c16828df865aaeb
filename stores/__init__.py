"""Corpus readers, embedders, Chroma stores, ingestion and the Search-R1 ``/retrieve`` server.
Names resolve lazily, so importing a light module does not import Chroma, torch or FastAPI.

Internal: the building blocks behind the public API in ``parallelsearch`` (docs/api.md); names here may change without notice.
"""

from __future__ import annotations

import importlib
from typing import Any

#: the public names, by the module (under ``parallelsearch.stores``) that defines them
_NAMES_BY_MODULE = {
    "encoding.embedder": ("DEFAULT_MODEL", "Embedder", "get_embedder"),
    "encoding.langchain_embeddings": ("ParallelSearchEmbeddings",),
    "errors": ("BadInputError", "ModelMismatchError", "StoreNotFoundError"),
    "chroma_store": ("ChromaStore", "describe_collections", "make_client"),
    "sharded_store": ("ShardedStore", "ShardError", "ShardHits"),
    "shard_spec": ("parse_store",),
    "ingestion.jsonfiles": ("SkipReport", "iter_json_records"),
    "passages": ("Passage", "passage_id", "split_contents", "to_contents"),
    "ingestion.readers": ("read_passages",),
    "ingestion.pipeline": ("IngestReport", "ingest"),
    "config": ("RetrievalConfig",),
    "http.retrieval_client": ("RetrieverClient", "RetrieverError", "RetrieverAuthError"),
    "http.retrieval_server": ("create_retrieval_app", "run_server"),
}
_LAZY = {name: f"parallelsearch.stores.{mod}" for mod, names in _NAMES_BY_MODULE.items() for name in names}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'parallelsearch.stores' has no attribute {name!r}")


__all__ = sorted(_LAZY)
