"""Open named stores where the settings say they live (embedded under home, or a Chroma server)."""

from __future__ import annotations

from typing import Any

from parallelsearch.settings import Settings, get_settings
from parallelsearch.stores import ChromaStore, Embedder, get_embedder, list_stores, make_client


def embedder_from_settings(s: Settings, model: str | None = None) -> Embedder:
    model = model or s.embedding_model
    if s.query_prefix or s.passage_prefix:
        return Embedder(model, query_prefix=s.query_prefix, passage_prefix=s.passage_prefix)
    return get_embedder(model)


def client_from_settings(s: Settings, host: str | None = None, port: int | None = None) -> Any:
    host = host or s.chroma_host
    return make_client(path=s.chroma_path, host=host, port=port or s.chroma_port)


def open_store(
    name: str,
    *,
    settings: Settings | None = None,
    create: bool = False,
    model: str | None = None,
    host: str | None = None,
    port: int | None = None,
) -> ChromaStore:
    """The store ``name``; ``create=False`` makes a missing store an error naming where it looked."""
    s = settings or get_settings()
    client = client_from_settings(s, host, port)
    return ChromaStore(
        name,
        client=client,
        embedder=embedder_from_settings(s, model),
        create=create,
        location=_location(s, host, port),
    )


def _location(s: Settings, host: str | None, port: int | None) -> str:
    return (
        f"http://{host or s.chroma_host}:{port or s.chroma_port}"
        if (host or s.chroma_host)
        else str(s.chroma_path)
    )


def describe_stores(
    settings: Settings | None = None, host: str | None = None, port: int | None = None
) -> list[dict]:
    s = settings or get_settings()
    location = _location(s, host, port)
    if not (host or s.chroma_host) and not s.chroma_path.exists():
        return []
    return [dict(row, location=location) for row in list_stores(client_from_settings(s, host, port))]


def searcher_for(
    stores: list[str] | None = None, retriever: str | None = None, *, settings: Settings | None = None
) -> Any:
    """The searcher the CLI, server and LangGraph app use: named stores (several = routing) or a /retrieve URL.

    Explicit arguments win; otherwise the settings' ``retriever_url``, then their ``stores``.
    """
    s = settings or get_settings()
    url = retriever or (None if stores else s.retriever_url)
    if url:
        from parallelsearch.agents.searchers import RemoteSearcher

        return RemoteSearcher(url)
    names = list(stores or s.stores)
    if not names:
        raise ValueError(
            "no store to search: pass --store NAME (or set PARALLELSEARCH_STORES) or a retriever URL"
        )
    opened = {name: open_store(name, settings=s) for name in names}
    return next(iter(opened.values())) if len(opened) == 1 else opened
