"""Corpus readers, embedders, Chroma stores, ingestion and the Search-R1 ``/retrieve`` server.

Names are resolved lazily, so importing a light module of this package (the passage
record, the readers) does not import Chroma, torch or FastAPI.
"""

from __future__ import annotations

import importlib
import warnings
from typing import Any

# ``ingest`` is both a submodule and a function: import the function eagerly, or the
# submodule (once imported by anything) would shadow it. It imports nothing heavy.
from parallelsearch.stores.ingest import IngestReport as IngestReport
from parallelsearch.stores.ingest import ingest as ingest

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
    "SkipReport": "parallelsearch.stores.jsonfiles",
    "iter_json_records": "parallelsearch.stores.jsonfiles",
    "Passage": "parallelsearch.stores.passages",
    "passage_id": "parallelsearch.stores.passages",
    "split_contents": "parallelsearch.stores.passages",
    "to_contents": "parallelsearch.stores.passages",
    "read_passages": "parallelsearch.stores.readers",
    "RetrievalConfig": "parallelsearch.stores.config",
    "RetrieverClient": "parallelsearch.stores.retrieval_client",
    "RetrieverError": "parallelsearch.stores.retrieval_client",
    "RetrieverAuthError": "parallelsearch.stores.retrieval_client",
    "create_retrieval_app": "parallelsearch.stores.retrieval_server",
    "run_server": "parallelsearch.stores.retrieval_server",
}

#: Names that moved out of this package; they still resolve, with a DeprecationWarning,
#: until 0.3. The QA question readers live in ``parallelsearch.data`` now.
_DEPRECATED = {
    "load_questions": "parallelsearch.data",
    "prepare": "parallelsearch.data",
    "split_of": "parallelsearch.data",
    "write_prepared": "parallelsearch.data",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    if name in _DEPRECATED:
        warnings.warn(
            f"parallelsearch.stores.{name} moved to {_DEPRECATED[name]}.{name}; the old name goes in 0.3",
            DeprecationWarning,
            stacklevel=2,
        )
        return getattr(importlib.import_module(_DEPRECATED[name]), name)
    raise AttributeError(f"module 'parallelsearch.stores' has no attribute {name!r}")


__all__ = sorted([*_LAZY, "IngestReport", "ingest"])
