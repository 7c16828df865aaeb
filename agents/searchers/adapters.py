"""What LangGraph users already have (functions, LangChain retrievers, vector stores, tools, objects
with ``asearch``) as searchers of passages; sync code runs in a worker thread, never on the loop."""

from __future__ import annotations

import asyncio
import inspect
import warnings
from collections.abc import Callable
from typing import Any

from parallelsearch.agents.searchers.base import describe_searcher, store_names
from parallelsearch.agents.searchers.normalise import text_result, to_passages
from parallelsearch.stores.passages import Passage

#: the parameter names that receive the graph's ``top_k``: a function's or a tool's parameter of
#: one of these names gets it, any other parameter never does (it keeps its default)
K_NAMES = ("k", "top_k", "topk", "top_n", "n", "n_results", "num_results", "max_results", "limit")


def _name_of(obj: Any) -> str:
    name = getattr(obj, "name", None) or getattr(obj, "__name__", None)
    return name if isinstance(name, str) and name else type(obj).__name__


def is_async_callable(fn: Any) -> bool:
    """``async def`` functions, methods, partials of them, and objects with an async ``__call__``."""
    call = type(fn).__call__ if callable(fn) and not inspect.isroutine(fn) else None
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(call)


def _k_param(fn: Callable[..., Any], name: str) -> inspect.Parameter | None:
    """The parameter of ``fn`` that receives k (the first after the query named in :data:`K_NAMES`),
    or None; a function that cannot be called with the query (and k) alone is refused, naming the
    parameter it would need."""
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):  # a builtin without a signature: give it the query only
        return None
    takes_query = params and params[0].kind in (
        inspect.Parameter.POSITIONAL_ONLY,
        inspect.Parameter.POSITIONAL_OR_KEYWORD,
        inspect.Parameter.VAR_POSITIONAL,
    )
    if not takes_query:
        raise TypeError(
            f"searcher function {name!r} takes no positional argument; it must take (query) or (query, k)"
        )
    rest = params[1:] if params[0].kind != inspect.Parameter.VAR_POSITIONAL else []
    k = next((p for p in rest if p.name in K_NAMES and p.kind != p.VAR_KEYWORD), None)
    if k is not None and k.kind == k.POSITIONAL_ONLY and k is not params[1]:
        k = None  # a positional-only k after other parameters cannot be reached by name
    needed = [
        p
        for p in rest
        if p is not k and p.default is p.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
    ]
    if needed:
        shown = ", ".join(p.name for p in params if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD))
        raise TypeError(
            f"searcher function {name!r} takes ({shown}) and needs {', '.join(p.name for p in needed)}: the "
            f"graph passes the query, and top_k only to a parameter named {', '.join(K_NAMES)}; give "
            f"{', '.join(p.name for p in needed)} a default or bind it (functools.partial)"
        )
    return k


#: return annotations a searcher function cannot have: no passages and no text in them
_NOT_RESULTS = ("int", "float", "bool", "bytes", "dict", "None", "NoneType", "Mapping")


def _check_returns(fn: Callable[..., Any], name: str) -> None:
    """Refuse, naming the function, one whose return annotation says it gives neither text nor a
    list (``-> int``, ``-> dict``): every search of it would fail at run time."""
    try:
        returns = inspect.signature(fn).return_annotation
    except (TypeError, ValueError):
        return
    shown = returns if isinstance(returns, str) else getattr(returns, "__name__", repr(returns))
    if returns is None or str(shown).split("[")[0].split(".")[-1] in _NOT_RESULTS:
        raise TypeError(
            f"searcher function {name!r} returns {shown}; a searcher returns text (-> str: the tool's result "
            "as the model reads it) or a list of passages, dicts, Documents or strings"
        )


def _text(content: Any) -> str:
    """A tool message's content as text (a list of content blocks joined)."""
    if isinstance(content, str):
        return content
    blocks = content if isinstance(content, list) else [content]
    return "".join(b if isinstance(b, str) else str((b or {}).get("text", "")) for b in blocks)


class FunctionSearcher:
    """Any callable ``query -> list`` or ``(query, k) -> list``, sync (run in a thread) or async.
    Only a parameter named like k (:data:`K_NAMES`) receives ``top_k``: ``(query, filter)`` is
    never called with ``filter=3``."""

    def __init__(self, fn: Callable[..., Any], name: str | None = None):
        self.fn = fn
        self.name = name or _name_of(fn)
        _check_returns(fn, self.name)
        k = _k_param(fn, self.name)
        self._k_positional = k is not None and k.kind == k.POSITIONAL_ONLY
        self._k_keyword = k.name if k is not None and not self._k_positional else None
        self._async = is_async_callable(fn)

    async def asearch(self, query: str, k: int = 3) -> list[Passage]:
        args: tuple[Any, ...] = (query, k) if self._k_positional else (query,)
        kwargs = {self._k_keyword: k} if self._k_keyword else {}
        if self._async:
            result = await self.fn(*args, **kwargs)
        else:
            result = await asyncio.to_thread(self.fn, *args, **kwargs)
            if inspect.isawaitable(result):  # a plain function that returns a coroutine
                result = await result
        if isinstance(result, str):  # its text is the result, as create_agent's tool message holds it
            return text_result(result, self.name)
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


def _retriever_k(retriever: Any) -> tuple[int | None, bool]:
    """The retriever's own result count and whether its user set it: ``search_kwargs['k']`` (set
    when present), or a ``k`` field (BM25, TF-IDF...; set when given at construction)."""
    kwargs = getattr(retriever, "search_kwargs", None)
    if isinstance(kwargs, dict):
        own, explicit = kwargs.get("k"), "k" in kwargs
    else:
        own, explicit = (
            getattr(retriever, "k", None),
            "k" in (getattr(retriever, "model_fields_set", None) or ()),
        )
    if not isinstance(own, int) or isinstance(own, bool):
        return None, False
    return own, explicit


class LangChainRetrieverSearcher:
    """Any LangChain ``BaseRetriever`` (e.g. ``vectorstore.as_retriever()``). A ``k`` its user set
    (``search_kwargs={"k": 1}``, ``BM25Retriever(k=2)``) is respected; otherwise the graph's
    ``top_k`` is passed as ``k`` where the retriever takes it. Where ``top_k`` does not reach the
    retriever, one warning says how many passages a search gives instead."""

    def __init__(self, retriever: Any, name: str | None = None):
        self.retriever = retriever
        self.name = name or _name_of(retriever)
        self._own_k, explicit = _retriever_k(retriever)
        self._k_path = None if explicit else _retriever_k_path(retriever)
        self._explicit = explicit
        self._warned = False

    async def asearch(self, query: str, k: int = 3) -> list[Passage]:
        if self._k_path == "async":
            docs = await self.retriever.ainvoke(query, k=k)
        elif self._k_path == "sync":
            docs = await asyncio.to_thread(self.retriever.invoke, query, k=k)
        else:
            self._warn_once(k)
            docs = await self.retriever.ainvoke(query)
        return to_passages(docs, self.name, k)

    def _warn_once(self, top_k: int) -> None:
        own = self._own_k
        if self._warned or own == top_k:
            return
        self._warned = True
        if self._explicit:
            what = f"keeps the k={own} it was given (the graph does not override it)"
        elif own is not None:
            what = f"takes no k per search and returns its own k={own} documents"
        else:
            what = "takes no k per search: its own settings decide how many documents it returns"
        cap = min(own, top_k) if own is not None else top_k
        warnings.warn(
            f"retriever {self.name!r} {what}; with the graph's top_k={top_k} a search gives at most "
            f"{cap} passage{'s' if cap != 1 else ''}",
            UserWarning,
            stacklevel=3,
        )


class VectorStoreSearcher:
    """Any LangChain ``VectorStore``: ``asimilarity_search(query, k=top_k)``."""

    def __init__(self, store: Any, name: str | None = None):
        self.store = store
        self.name = name or type(store).__name__

    async def asearch(self, query: str, k: int = 3) -> list[Passage]:
        return to_passages(await self.store.asimilarity_search(query, k=k), self.name, k)


class ToolSearcher:
    """Any LangChain tool with one text argument (and optionally ``k``/``top_k``/...). Its text is
    what the model reads, verbatim (one passage for the record); a list is normalised item by item;
    a ``content_and_artifact`` tool's content is what the model reads and its artifact stays on the
    tool message (its items, when passages, the record's passages)."""

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
            return text_result(_text(msg.content), self.name, msg.artifact)
        result = await self.tool.ainvoke(payload)
        if isinstance(result, str):
            return text_result(result, self.name)
        return to_passages(result, self.name, k)


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
