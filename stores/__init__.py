"""Corpus readers, embedders, Chroma stores, ingestion and the Search-R1 ``/retrieve`` server."""

from parallelsearch.stores.benchmarks import load_questions, prepare, split_of, write_prepared
from parallelsearch.stores.chroma_store import ChromaStore, list_stores, make_client
from parallelsearch.stores.embedders import DEFAULT_MODEL, Embedder, get_embedder
from parallelsearch.stores.errors import BadInputError, ModelMismatchError, StoreNotFoundError
from parallelsearch.stores.ingest import IngestReport, ingest
from parallelsearch.stores.jsonfiles import SkipReport, iter_json_records
from parallelsearch.stores.passages import Passage, passage_id, split_contents, to_contents
from parallelsearch.stores.readers import read_passages
from parallelsearch.stores.retrieval_client import RetrieverClient, RetrieverError
from parallelsearch.stores.retrieval_server import create_retrieval_app, run_server

__all__ = [
    "DEFAULT_MODEL",
    "BadInputError",
    "ChromaStore",
    "Embedder",
    "IngestReport",
    "ModelMismatchError",
    "Passage",
    "RetrieverClient",
    "RetrieverError",
    "SkipReport",
    "StoreNotFoundError",
    "create_retrieval_app",
    "get_embedder",
    "ingest",
    "iter_json_records",
    "list_stores",
    "load_questions",
    "make_client",
    "passage_id",
    "prepare",
    "read_passages",
    "run_server",
    "split_contents",
    "split_of",
    "to_contents",
    "write_prepared",
]
