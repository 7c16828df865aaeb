"""Searcher backends: a local store, a remote ``/retrieve`` server, multi-store routing with
reciprocal rank fusion, and :func:`as_searcher`, the one entry that turns anything a user
passes into a searcher (the foreign kinds are wrapped by :mod:`.adapters`)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeAlias

from langchain_core.retrievers import BaseRetriever
from langchain_core.runnables import Runnable
from langchain_core.tools import BaseTool
from langchain_core.vectorstores import VectorStore

from parallelsearch.agents.searchers import adapters as ad
from parallelsearch.agents.searchers.base import Searcher, describe_searcher
from parallelsearch.agents.searchers.deferred import DeferredSearcher
from parallelsearch.agents.searchers.normalise import shown
from parallelsearch.stores.http.retrieval_client import RetrieverClient
from parallelsearch.stores.passage_store import PassageStore
from parallelsearch.stores.passages import Passage
from parallelsearch.stores.sharded_store import ShardedStore


class StoreSearcher:
    """A store of any kind (:class:`PassageStore`) or a :class:`ShardedStore`; concurrent queries are
    coalesced into one encoder batch."""

    def __init__(self, store: PassageStore | ShardedStore):
        self.store = store
        self.name = store.name

    async def asearch(self, query: str, k: int = 3) -> list[Passage]:
        return await self.store.asearch(query, k)

    def info(self) -> list[dict[str, Any]]:
        return [self.store.info()]


class RemoteSearcher:
    """Any Search-R1 ``/retrieve`` server; concurrent queries travel in one request."""

    def __init__(self, url_or_client: str | RetrieverClient, **client_kwargs: Any):
        if not isinstance(url_or_client, RetrieverClient):
            url_or_client = RetrieverClient(url_or_client, **client_kwargs)
        self.client = url_or_client
        self.name = self.client.name

    async def asearch(self, query: str, k: int = 3) -> list[Passage]:
        return await self.client.asearch(query, k)

    def info(self) -> list[dict[str, Any]]:
        return [{"name": self.name, "kind": "retrieve", "url": self.client.url}]


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

    def __init__(self, searchers: Mapping[str, Searcher]):
        if not searchers:
            raise ValueError("MultiStoreSearcher needs at least one named searcher")
        self.searchers = dict(searchers)
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
        return reciprocal_rank_fusion(results, k)

    def info(self) -> list[dict[str, Any]]:
        return [row for s in self.searchers.values() for row in describe_searcher(s)]


#: what as_searcher accepts, as its refusal names it
ACCEPTED_SEARCHERS = (
    "a store name, a /retrieve URL, a store (any PassageStore, e.g. ChromaStore), a RetrieverClient, a {name: searcher} mapping, "
    "a LangChain BaseRetriever, VectorStore, tool or other Runnable, a function query -> list or (query, k) -> list "
    "(sync or async), or an object with an async asearch(query, k)"
)
#: one thing :func:`as_searcher` accepts (:data:`ACCEPTED_SEARCHERS`), as an editor shows it: a
#: store name or ``/retrieve`` URL (str), a searcher, a store, a LangChain retriever, vector store,
#: tool or other Runnable, or a search function
SearcherLike: TypeAlias = (
    str
    | Searcher
    | PassageStore
    | ShardedStore
    | RetrieverClient
    | BaseRetriever
    | VectorStore
    | BaseTool
    | Runnable[Any, Any]
    | Callable[..., Any]
)
#: what a builder takes as its searchers: one, a list (routed by their names) or a ``{name: searcher}`` mapping
Searchers: TypeAlias = SearcherLike | Sequence[SearcherLike] | Mapping[str, SearcherLike]
#: our own searchers return passages already: they pass through unwrapped
_OWN = (
    DeferredSearcher,
    StoreSearcher,
    RemoteSearcher,
    MultiStoreSearcher,
    ad.LangChainRetrieverSearcher,
    ad.VectorStoreSearcher,
    ad.ToolSearcher,
    ad.RunnableSearcher,
    ad.FunctionSearcher,
    ad.ObjectSearcher,
)


def _named_store(name: str, open_store: Callable[[str], Any] | None) -> Searcher:
    """A store name, opened by ``open_store`` (the app layer knows where stores live; this
    layer does not import its settings)."""
    if open_store is None:
        raise TypeError(
            f"a store name ({name!r}) needs to know where stores live: pass it to "
            f"parallelsearch.create_parallel_search_agent(model, {name!r}, retrieval=...), or pass "
            f"parallelsearch.open_store({name!r}) instead of the name"
        )
    store = open_store(name)
    return store if isinstance(store, _OWN) else StoreSearcher(store)


def _langchain_searcher(obj: Any, name: str | None) -> Searcher | None:
    from langchain_core.language_models import BaseLanguageModel
    from langchain_core.retrievers import BaseRetriever
    from langchain_core.runnables import Runnable
    from langchain_core.tools import BaseTool
    from langchain_core.vectorstores import VectorStore

    if isinstance(obj, BaseRetriever):
        return ad.LangChainRetrieverSearcher(obj, name)
    if isinstance(obj, VectorStore):
        return ad.VectorStoreSearcher(obj, name)
    if isinstance(obj, BaseTool):
        return ad.ToolSearcher(obj, name)
    if isinstance(obj, BaseLanguageModel):
        raise TypeError(
            f"cannot use the language model {type(obj).__name__} as a searcher (is it the policy? the "
            f"policy comes first, the searcher second); accepted: {ACCEPTED_SEARCHERS}"
        )
    if isinstance(obj, Runnable) and not hasattr(obj, "asearch"):  # a Runnable with its own asearch: below
        return ad.RunnableSearcher(obj, name)
    return None


def as_searcher(
    obj: Any, name: str | None = None, *, open_store: Callable[[str], Any] | None = None
) -> Searcher:
    """What the graphs search, from anything in :data:`ACCEPTED_SEARCHERS` (else refused at build
    time, naming what was passed). ``name`` names a wrapped object; ``open_store`` opens a store name.
    """
    if isinstance(obj, _OWN):
        return obj
    if isinstance(obj, ShardedStore | PassageStore):  # a sharded store's partial answers keep their note
        return StoreSearcher(obj)
    if isinstance(obj, RetrieverClient) or (isinstance(obj, str) and obj.startswith(("http://", "https://"))):
        return RemoteSearcher(obj)
    if isinstance(obj, str) and obj.strip():
        return _named_store(obj.strip(), open_store)
    if isinstance(obj, Mapping):
        return MultiStoreSearcher({k: as_searcher(v, name=k, open_store=open_store) for k, v in obj.items()})
    wrapped = _langchain_searcher(obj, name)  # first: a VectorStore has an asearch of its own signature
    if wrapped is not None:
        return wrapped
    if hasattr(obj, "asearch"):
        if not ad.is_async_callable(obj.asearch):
            raise TypeError(
                f"{type(obj).__name__}.asearch is not async: a searcher's asearch must be 'async def' "
                "(a sync search function can be passed itself: it runs in a worker thread)"
            )
        return ad.ObjectSearcher(obj, name)
    if callable(obj) and not isinstance(obj, type):
        return ad.FunctionSearcher(obj, name)
    raise TypeError(
        f"cannot use {type(obj).__name__} {shown(obj, 80)} as a searcher; accepted: {ACCEPTED_SEARCHERS}"
    )
