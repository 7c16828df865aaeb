"""Named stores where the settings say they live: settings -> :class:`RetrievalConfig` -> factory.

A convenience for Python users and the stores CLI (``open_store("hotpotqa")``); the
objects themselves are built by :mod:`parallelsearch.graphs.factory`.
"""

from __future__ import annotations

import warnings
from typing import Any

from parallelsearch.graphs import factory
from parallelsearch.settings import Settings, get_settings
from parallelsearch.stores.chroma_store import ChromaStore
from parallelsearch.stores.config import RetrievalConfig


def retrieval_config(
    settings: Settings | None = None,
    *,
    model: str | None = None,
    host: str | None = None,
    port: int | None = None,
) -> RetrievalConfig:
    """The settings' retrieval fields with explicit values over them (``None`` = not given)."""
    cfg = (settings or get_settings()).retrieval()
    given = {
        k: v for k, v in {"embedding_model": model, "chroma_host": host, "chroma_port": port}.items() if v
    }
    return cfg.model_copy(update=given) if given else cfg


def open_store(
    name: str,
    *,
    settings: Settings | None = None,
    create: bool = False,
    model: str | None = None,
    host: str | None = None,
    port: int | None = None,
) -> ChromaStore:
    """The store ``name``; ``create=False`` makes a missing store an error naming where it looked,
    and opens a store the settings declare sharded (or a ``NAME=SHARD,...`` name) as one."""
    cfg = retrieval_config(settings, model=model, host=host, port=port)
    if not create:
        return factory.make_named_store(cfg, name)  # type: ignore[return-value]
    return factory.make_store(cfg, name, create=create)


def describe_stores(
    settings: Settings | None = None, host: str | None = None, port: int | None = None
) -> list[dict]:
    """Every store where the settings (or ``host``/``port``) say stores live."""
    return factory.describe_stores(retrieval_config(settings, host=host, port=port))


def searcher_for(
    stores: list[str] | None = None, retriever: str | None = None, *, settings: Settings | None = None
) -> Any:
    """Deprecated (goes in 0.3): use ``factory.make_searcher(settings.retrieval())``."""
    warnings.warn(
        "parallelsearch.registry.searcher_for is deprecated; use "
        "parallelsearch.graphs.factory.make_searcher(RetrievalConfig) instead",
        DeprecationWarning,
        stacklevel=2,
    )
    cfg = (settings or get_settings()).retrieval()
    if stores or retriever:
        cfg = cfg.model_copy(update={"stores": list(stores or []), "retriever_url": retriever})
    return factory.make_searcher(cfg)
