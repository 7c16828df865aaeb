"""Searcher backends: a local store, a remote ``/retrieve`` server, any LangChain retriever,
and multi-store routing with reciprocal rank fusion."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any

from parallelsearch.agents.searchers.base import Searcher, store_names
from parallelsearch.stores.chroma_store import ChromaStore
from parallelsearch.stores.passages import Passage, passage_id
from parallelsearch.stores.retrieval_client import RetrieverClient


class StoreSearcher:
    """A :class:`ChromaStore`; concurrent queries are coalesced into one encoder batch."""

    def __init__(self, store: ChromaStore):
        self.store = store
        self.name = store.name

    async def asearch(self, query: str, k: int = 3) -> list[Passage]:
        return await self.store.asearch(query, k)

    def info(self) -> list[dict[str, Any]]:
        return [self.store.info()]


class RemoteSearcher:
    """Any Search-R1 ``/retrieve`` server; concurrent queries travel in one request."""

    def __init__(self, url_or_client: str | RetrieverClient, **client_kwargs: Any):
        self.client = (
            url_or_client
            if isinstance(url_or_client, RetrieverClient)
            else RetrieverClient(url_or_client, **client_kwargs)
        )
        self.name = self.client.name

    async def asearch(self, query: str, k: int = 3) -> list[Passage]:
        return await self.client.asearch(query, k)

    def info(self) -> list[dict[str, Any]]:
        return [{"name": self.name, "kind": "retrieve", "url": self.client.url}]


class LangChainRetrieverSearcher:
    """Any LangChain ``BaseRetriever`` (e.g. langchain-chroma's ``as_retriever()``).

    The title is read from ``metadata['title']`` when present, else from a Search-R1
    style first line of the page content.
    """

    def __init__(self, retriever: Any, name: str = "retriever"):
        self.retriever = retriever
        self.name = name

    async def asearch(self, query: str, k: int = 3) -> list[Passage]:
        docs = await self.retriever.ainvoke(query)
        out = []
        for d in docs[:k]:
            meta = dict(getattr(d, "metadata", {}) or {})
            text = d.page_content
            title = meta.get("title")
            if title is None:
                first, _, rest = text.partition("\n")
                title, text = (first.strip('"'), rest) if rest else ("", text)
            score = meta.get("score")
            out.append(
                Passage(
                    id=str(meta.get("id") or getattr(d, "id", None) or passage_id(title, text)),
                    title=str(title),
                    text=text.strip(),
                    score=float(score) if isinstance(score, int | float) else None,
                    store=self.name,
                )
            )
        return out


def reciprocal_rank_fusion(rankings: Sequence[Sequence[Passage]], k: int, c: int = 60) -> list[Passage]:
    """Fuse ranked lists: score(p) = sum 1 / (c + rank). Ties keep first-seen order."""
    scores: dict[str, float] = {}
    first: dict[str, Passage] = {}
    for ranking in rankings:
        for rank, p in enumerate(ranking, 1):
            key = p.id or f"{p.title}\x00{p.text}"
            scores[key] = scores.get(key, 0.0) + 1.0 / (c + rank)
            first.setdefault(key, p)
    order = sorted(scores, key=lambda key: -scores[key])
    return [
        Passage(first[key].id, first[key].title, first[key].text, scores[key], first[key].store)
        for key in order[:k]
    ]


class MultiStoreSearcher:
    """Route ``store_name: query`` to that store only; otherwise search all and fuse with RRF."""

    def __init__(self, searchers: Mapping[str, Searcher], rrf_c: int = 60):
        if not searchers:
            raise ValueError("MultiStoreSearcher needs at least one named searcher")
        self.searchers = dict(searchers)
        self.rrf_c = rrf_c
        self.name = "+".join(self.searchers)

    def store_names(self) -> list[str]:
        return list(self.searchers)

    def route(self, query: str) -> tuple[list[str], str]:
        head, sep, rest = query.partition(":")
        if sep and head.strip() in self.searchers and rest.strip():
            return [head.strip()], rest.strip()
        return list(self.searchers), query

    async def asearch(self, query: str, k: int = 3) -> list[Passage]:
        names, q = self.route(query)
        if len(names) == 1:
            return await self.searchers[names[0]].asearch(q, k)
        results = await asyncio.gather(*(self.searchers[n].asearch(q, k) for n in names))
        return reciprocal_rank_fusion(results, k, self.rrf_c)

    def info(self) -> list[dict[str, Any]]:
        return [row for s in self.searchers.values() for row in describe_searcher(s)]


def describe_searcher(searcher: Any) -> list[dict[str, Any]]:
    """What a searcher searches, one dict per store (``GET /stores`` lists these)."""
    info = getattr(searcher, "info", None)
    if callable(info):
        got = info()
        return got if isinstance(got, list) else [got]
    return [{"name": n} for n in store_names(searcher)]


def as_searcher(obj: Any) -> Searcher:
    """Wrap stores, URLs, clients and LangChain retrievers; pass searchers through."""
    if isinstance(obj, ChromaStore):
        return StoreSearcher(obj)
    if isinstance(obj, RetrieverClient):
        return RemoteSearcher(obj)
    if isinstance(obj, str) and obj.startswith(("http://", "https://")):
        return RemoteSearcher(obj)
    if isinstance(obj, Mapping):
        return MultiStoreSearcher({k: as_searcher(v) for k, v in obj.items()})
    if hasattr(obj, "asearch"):
        return obj
    try:
        from langchain_core.retrievers import BaseRetriever

        if isinstance(obj, BaseRetriever):
            return LangChainRetrieverSearcher(obj)
    except ImportError:  # pragma: no cover
        pass
    raise TypeError(
        f"cannot use {type(obj).__name__} as a searcher (need a store, URL, retriever or .asearch)"
    )
