"""The FAISS store kind as configuration opens it: for reading (``search``, ``serve-retriever``,
the graphs), for writing (``index``, one writer at a time), listed (``stores``) and checked
(``stores --check``, ``index --verify``); ``graphs.factory.STORE_KINDS`` names these four."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from parallelsearch.stores.config import RetrievalConfig
from parallelsearch.stores.encoding.embedder import Embedder, make_embedder
from parallelsearch.stores.errors import ParallelSearchError
from parallelsearch.stores.faiss_store import FaissStore, find_files, store_names
from parallelsearch.stores.passage_store import dropped_unless_written
from parallelsearch.stores.store_check import StoreCheck
from parallelsearch.stores.store_lock import StoreWriteLock


def faiss_root(cfg: RetrievalConfig) -> Path:
    if cfg.faiss_path is None:
        raise ValueError("no FAISS store folder: set faiss_path (--faiss-path, PARALLELSEARCH_FAISS_PATH)")
    return cfg.faiss_path


def faiss_location(cfg: RetrievalConfig) -> str:
    return str(cfg.faiss_path) if cfg.faiss_path is not None else "(no FAISS store folder)"


def _embedder(cfg: RetrievalConfig, manifest: dict[str, Any], name: str) -> Embedder:
    recorded = manifest.get("encoder_backend") if cfg.encoder_backend == "auto" else None
    try:
        return make_embedder(cfg, recorded=recorded)
    except ValueError as e:
        raise ValueError(f"store {name!r} at {faiss_location(cfg)}: {e}") from e


def open_faiss_store(cfg: RetrievalConfig, name: str, *, embedder: Embedder | None = None) -> FaissStore:
    """Store ``name`` for reading: memory-mapped, on the GPUs when FAISS has some."""
    files = find_files(faiss_root(cfg), name)
    return FaissStore(files, embedder or _embedder(cfg, files.manifest, name), location=faiss_location(cfg))


@contextlib.contextmanager
def writing_faiss_store(cfg: RetrievalConfig, name: str, **options: Any) -> Iterator[FaissStore]:
    """Store ``name`` opened (created when missing) for writing under the store's writer lock; a
    store this call created is removed again when the block fails before adding anything.
    ``options``: ``graphs.factory.writing_store``'s keywords (``lock_timeout_s``, ``on_wait``,
    ``embedder``, ``embedder_for``; ``hnsw`` is Chroma's and refused)."""
    if options.get("hnsw"):
        raise ValueError("HNSW parameters (--hnsw-*, --space) are Chroma's; a FAISS flat store has none")
    root = faiss_root(cfg)
    lock_timeout_s = options.get("lock_timeout_s")
    timeout = cfg.store_lock_timeout_s if lock_timeout_s is None else lock_timeout_s
    embedder: Embedder | None = options.get("embedder")
    embedder_for: Callable[[str | None], Embedder] | None = options.get("embedder_for")
    with StoreWriteLock(root, name, timeout_s=timeout, on_wait=options.get("on_wait")):
        files = find_files(root, name, create=True)
        if embedder is None:
            recorded = files.manifest.get("encoder_backend") if cfg.encoder_backend == "auto" else None
            embedder = embedder_for(recorded) if embedder_for else _embedder(cfg, files.manifest, name)
        store = FaissStore(files, embedder, location=faiss_location(cfg), writable=True)
        try:
            with dropped_unless_written(store):
                yield store
        finally:
            store.close()


def describe_faiss_stores(cfg: RetrievalConfig, *, timeout_s: float = 0.0) -> list[dict[str, Any]]:
    """Name, count, model and files of every FAISS store under ``faiss_path`` (read in this process:
    FAISS refuses a damaged file with an error; a store that does not open is listed with it)."""
    if cfg.faiss_path is None:
        return []
    rows = []
    for name in store_names(cfg.faiss_path):
        try:
            store = open_faiss_store(cfg, name)
        except (ParallelSearchError, ValueError, OSError) as e:
            rows.append({"name": name, "count": -1, "error": str(e)[:400], "location": faiss_location(cfg)})
            continue
        rows.append(store.info())
        store.close()
    return rows


def check_faiss_store(
    cfg: RetrievalConfig, name: str, *, timeout_s: float = 0.0, progress: bool = False
) -> StoreCheck:
    """Every vector and corpus line of store ``name`` read back; a store that does not open is the finding."""
    try:
        store = open_faiss_store(cfg, name)
    except (ParallelSearchError, OSError) as e:
        if isinstance(e, LookupError):
            raise
        return StoreCheck(store=name, count=-1, first_error=str(e)[:400])
    try:
        return store.verify(progress=progress)
    finally:
        store.close()
