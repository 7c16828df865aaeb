"""Named stores where the settings say they live: settings -> :class:`RetrievalConfig` -> factory.

A convenience for Python users and the stores CLI (``open_store("hotpotqa")``); the
objects themselves are built by :mod:`parallelsearch.graphs.factory`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from parallelsearch.graphs import factory
from parallelsearch.settings import Settings, get_settings
from parallelsearch.stores.config import RetrievalConfig
from parallelsearch.stores.passage_store import PassageStore

if TYPE_CHECKING:
    from parallelsearch.stores.sharded_store import ShardedStore


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
) -> PassageStore | ShardedStore:
    """The store ``name`` (of the settings' store kind); ``create=False`` makes a missing store an error naming where it looked,
    and opens a store the settings declare sharded (or a ``NAME=SHARD,...`` name) as one."""
    cfg = retrieval_config(settings, model=model, host=host, port=port)
    if not create:
        return factory.make_named_store(cfg, name)
    return factory.make_store(cfg, name, create=create)
