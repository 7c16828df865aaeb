"""What LangGraph users already have (functions, LangChain retrievers, vector stores, tools, objects
with ``asearch``) as searchers of passages; sync code runs in a worker thread, never on the loop."""

from __future__ import annotations

import asyncio
import inspect
import warnings
from collections.abc import Callable
from typing import Any

from parallelsearch.agents.searchers.base import describe_searcher, store_names
from parallelsearch.agents.searchers.normalise import to_passages
from parallelsearch.stores.passages import Passage

#: a tool argument, or a function's optional second argument, of one of these names receives top_k
K_NAMES = ("k", "top_k", "n", "limit", "num_results", "max_results")


def _name_of(obj: Any) -> str:
    name = getattr(obj, "name", None) or getattr(obj, "__name__", None)
    return name if isinstance(name, str) and name else type(obj).__name__


def is_async_callable(fn: Any) -> bool:
    """``async def`` functions, methods, partials of them, and objects with an async ``__call__``."""
    call = type(fn).__call__ if callable(fn) and not inspect.isroutine(fn) else None
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(call)


def _k_style(fn: Callable[..., Any], name: str) -> tuple[str, str | None]:
    """How ``fn`` takes k: ``("positional", None)`` (query, k), ``("keyword", NAME)`` (a keyword-only
    ``k``/``top_k``/...), or ``("none", None)`` (the query only)."""
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):  # a builtin without a signature: give it the query only
        return "none", None
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    required = [p for p in positional if p.default is p.empty]
    var_positional = any(p.kind == p.VAR_POSITIONAL for p in params)
    if not positional and not var_positional:
        raise TypeError(
            f"searcher function {name!r} takes no positional argument; it must take (query) or (query, k)"
        )
    if len(required) > 2:
        raise TypeError(
            f"searcher function {name!r} needs {len(required)} arguments "
            f"({', '.join(p.name for p in required)}); it must take (query) or (query, k)"
        )
    if len(required) == 2 or (len(positional) >= 2 and positional[1].name in K_NAMES):
        return "positional", None
    keyword = next((p.name for p in params if p.kind == p.KEYWORD_ONLY and p.name in K_NAMES), None)
    if keyword:
        return "keyword", keyword
    if var_positional and len(positional) <= 1:
        return "positional", None
    # e.g. (query, filters=None): an optional second argument that is not k keeps its default
    return "none", None


class FunctionSearcher:
    """Any callable ``query -> list`` or ``(query, k) -> list``, sync (run in a thread) or async."""

    def __init__(self, fn: Callable[..., Any], name: str | None = None):
        self.fn = fn
        self.name = name or _name_of(fn)
        self._k, self._k_keyword = _k_style(fn, self.name)
        self._async = is_async_callable(fn)

    async def asearch(self, query: str, k: int = 3) -> list[Passage]:
        args: tuple[Any, ...] = (query, k) if self._k == "positional" else (query,)
        kwargs = {self._k_keyword: k} if self._k_keyword else {}
        if self._async:
            result = await self.fn(*args, **kwargs)
        else:
            result = await asyncio.to_thread(self.fn, *args, **kwargs)
            if inspect.isawaitable(result):  # a plain function that returns a coroutine
                result = await result
        return to_passages(result, self.name, k)


def _retriever_k_path(retriever: Any) -> str | None:
    """How k reaches the retriever: ``"async"`` (``ainvoke(q, k=)``), ``"sync"`` (only its sync search
    names k, and LangChain's default async path drops it: ``invoke`` in a thread), or None."""
    from langchain_core.retrievers import BaseRetriever
    from langchain_core.vectorstores import VectorStoreRetriever

    def names_k(method: str) -> bool:
        fn = getattr(type(retriever), method, None)
        try:
            return fn is not None and "k" in inspect.signature(fn).parameters
        except (TypeError, ValueError):
            return False

    if isinstance(retriever, VectorStoreRetriever):
        return "async"
    own_async = type(retriever)._aget_relevant_documents is not BaseRetriever._aget_relevant_documents
    if own_async and names_k("_aget_relevant_documents"):
        return "async"
    if names_k("_get_relevant_documents"):
        return "sync"
    return None


def _retriever_own_k(retriever: Any) -> int | None:
    """The retriever's own result count: ``search_kwargs['k']`` or a ``k`` attribute (BM25, TF-IDF...)."""
    kwargs = getattr(retriever, "search_kwargs", None)
    own = kwargs.get("k") if isinstance(kwargs, dict) else getattr(retriever, "k", None)
    return own if isinstance(own, int) and not isinstance(own, bool) else None


class LangChainRetrieverSearcher:
    """Any LangChain ``BaseRetriever`` (e.g. ``vectorstore.as_retriever()``). The graph's ``top_k``
    is passed as ``k`` where the retriever takes it; otherwise its own ``k`` caps the passages
    (warned about once when it is below ``top_k``)."""

    def __init__(self, retriever: Any, name: str | None = None):
        self.retriever = retriever
        self.name = name or _name_of(retriever)
        self._k_path = _retriever_k_path(retriever)
        self._warned = False

    async def asearch(self, query: str, k: int = 3) -> list[Passage]:
        if self._k_path == "async":
            docs = await self.retriever.ainvoke(query, k=k)
        elif self._k_path == "sync":
            docs = await asyncio.to_thread(self.retriever.invoke, query, k=k)
        else:
            own = _retriever_own_k(self.retriever)
            if own is not None and own < k and not self._warned:
                self._warned = True
                warnings.warn(
                    f"retriever {self.name!r} returns at most {own} documents (its k) but the graph asks for "
                    f"top_k={k}; its k caps every search: set its k to at least {k}",
                    UserWarning,
                    stacklevel=2,
                )
            docs = await self.retriever.ainvoke(query)
        return to_passages(docs, self.name, k)


class VectorStoreSearcher:
    """Any LangChain ``VectorStore``: ``asimilarity_search(query, k=top_k)``."""

    def __init__(self, store: Any, name: str | None = None):
        self.store = store
        self.name = name or type(store).__name__

    async def asearch(self, query: str, k: int = 3) -> list[Passage]:
        return to_passages(await self.store.asimilarity_search(query, k=k), self.name, k)


class ToolSearcher:
    """Any LangChain tool with one text argument (and optionally ``k``/``top_k``/...). Text is one
    passage, a list is normalised item by item, a ``content_and_artifact`` tool gives its artifact."""

    def __init__(self, tool: Any, name: str | None = None):
        self.tool = tool
        self.name = name or tool.name
        args = list(getattr(tool, "args", {}) or {})
        self._k_arg = next((a for a in args if a in K_NAMES), None)
        text_args = [a for a in args if a != self._k_arg]
        if len(text_args) != 1:
            raise TypeError(
                f"tool {self.name!r} takes arguments {args}; a searcher tool takes one query argument "
                f"(and optionally one of {', '.join(K_NAMES)})"
            )
        self._query_arg = text_args[0]

    async def asearch(self, query: str, k: int = 3) -> list[Passage]:
        payload: dict[str, Any] = {self._query_arg: query}
        if self._k_arg:
            payload[self._k_arg] = k
        if getattr(self.tool, "response_format", "content") == "content_and_artifact":
            call = {"name": self.tool.name, "args": payload, "id": "parallelsearch", "type": "tool_call"}
            msg = await self.tool.ainvoke(call)
            result: Any = msg.artifact if isinstance(msg.artifact, list) else msg.content
        else:
            result = await self.tool.ainvoke(payload)
        return to_passages([result] if isinstance(result, str) else result, self.name, k)


class RunnableSearcher:
    """Any other LangChain ``Runnable`` taking the query (an LCEL chain, a ``RunnableLambda``):
    a list result is normalised item by item, a text result is one passage."""

    def __init__(self, runnable: Any, name: str | None = None):
        self.runnable = runnable
        self.name = name or runnable.get_name()

    async def asearch(self, query: str, k: int = 3) -> list[Passage]:
        result = await self.runnable.ainvoke(query)
        return to_passages([result] if isinstance(result, str) else result, self.name, k)


class ObjectSearcher:
    """A user's object with ``async asearch(query, k)``; its results are normalised like the rest."""

    def __init__(self, obj: Any, name: str | None = None):
        self.inner = obj
        self.name = name or _name_of(obj)

    async def asearch(self, query: str, k: int = 3) -> list[Passage]:
        return to_passages(await self.inner.asearch(query, k), self.name, k)

    def store_names(self) -> list[str]:
        return store_names(self.inner)

    def info(self) -> list[dict[str, Any]]:
        return describe_searcher(self.inner)
