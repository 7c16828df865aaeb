"""The one async searcher protocol (a query and k in, passages out) and its guard, which turns
any failure into an error string for that sub-query: a broken searcher never kills an episode.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from parallelsearch.agents.searchers.normalise import SearcherOutputError
from parallelsearch.stores.errors import ParallelSearchError
from parallelsearch.stores.http.retrieval_client import RetrieverAuthError
from parallelsearch.stores.passages import Passage


class SearcherOpenError(ParallelSearchError, RuntimeError):
    """A searcher opened at its first search could not be opened: misconfiguration (a missing
    store, an unreachable Chroma server), so the guard lets it stop the run, as a failed open at
    build time would, instead of retrying it for every sub-query."""


@runtime_checkable
class Searcher(Protocol):
    async def asearch(self, query: str, k: int = 3) -> list[Passage]: ...


@dataclass
class SearchOutcome:
    passages: list[Passage]
    error: str | None
    attempts: int
    #: what the searcher said about an answer it gave (a sharded store answering without a shard)
    note: str | None = None
    #: a tool's own text and artifact (``normalise.ToolResult``): what its tool message holds
    content: str | None = None
    artifact: Any = None


async def _with_timeout(aw: Awaitable[list[Passage]], timeout_s: float) -> list[Passage]:
    """``asyncio.timeout`` where it exists: unlike ``wait_for`` on 3.11, it adds no task per call."""
    if sys.version_info >= (3, 11):
        async with asyncio.timeout(timeout_s):
            return await aw
    return await asyncio.wait_for(aw, timeout=timeout_s)  # pragma: no cover - Python 3.10


async def guarded_search(
    searcher: Searcher,
    query: str,
    k: int,
    *,
    timeout_s: float = 10.0,
    retries: int = 1,
    backoff_s: float = 0.05,
) -> SearchOutcome:
    """Search with a per-attempt timeout and ``retries`` extra attempts. Never raises, but on
    cancellation, a refused retriever key and a searcher that cannot be opened (misconfigured, not
    broken: the run stops on them)."""
    err = "unknown error"
    aopen = getattr(searcher, "aopen", None)
    if aopen is not None:  # a searcher opened at its first search: opening is not searching
        await aopen()
    for attempt in range(1, retries + 2):
        try:
            res = await _with_timeout(searcher.asearch(query, k), timeout_s)
            content = getattr(res, "content", None)
            if content is None:
                return SearchOutcome(list(res)[:k], None, attempt, getattr(res, "note", None))
            return SearchOutcome(list(res)[:k], None, attempt, None, content, getattr(res, "artifact", None))
        except asyncio.TimeoutError:
            err = f"timed out after {timeout_s:g} s"
        except (asyncio.CancelledError, RetrieverAuthError, SearcherOpenError):
            raise
        except SearcherOutputError as e:  # the searcher's own mistake: a retry returns the same
            return SearchOutcome([], f"{type(e).__name__}: {e}"[:500], attempt)
        except Exception as e:  # noqa: BLE001 - any searcher failure becomes an error entry
            err = f"{type(e).__name__}: {e}"[:300]
        if attempt <= retries:
            await asyncio.sleep(backoff_s * attempt)
    return SearchOutcome([], f"{err} ({retries + 1} attempt{'s' if retries else ''})", retries + 1)


def store_names(searcher: object) -> list[str]:
    """Names of the stores behind a searcher (the prompt lists them when there are several)."""
    names = getattr(searcher, "store_names", None)
    if callable(names):
        return list(names())
    return [getattr(searcher, "name", type(searcher).__name__)]


def describe_searcher(searcher: Any) -> list[dict[str, Any]]:
    """What a searcher searches, one dict per store (``GET /stores`` lists these)."""
    info = getattr(searcher, "info", None)
    if callable(info):
        got = info()
        return got if isinstance(got, list) else [got]
    return [{"name": n} for n in store_names(searcher)]
