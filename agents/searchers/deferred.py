"""A searcher opened at its first search: a module that builds graphs at import (``langgraph dev``'s
``langgraph.json`` names module attributes) pays for Chroma, torch and the encoder then, in a
worker thread, instead of at import. A failed open stops the run with the cause, like a failed open
at build time would, instead of becoming one error entry per sub-query."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Sequence
from typing import Any

from parallelsearch.agents.searchers.base import Searcher, SearcherOpenError, describe_searcher
from parallelsearch.stores.passages import Passage


class DeferredSearcher:
    """``open()`` run once, at the first search (again after a failure: the store may exist by
    then); ``names`` are the stores it will search, for the prompt before it is open."""

    def __init__(self, open: Callable[[], Searcher], names: Sequence[str], *, what: str = "the searcher"):
        if not names:
            raise ValueError("a deferred searcher needs the names of the stores it will search")
        self._open = open
        self._names = list(names)
        self._what = what
        self._lock = threading.Lock()
        self.inner: Searcher | None = None
        self.name = "+".join(self._names)

    def opened(self) -> Searcher:
        """The searcher, opened now if it is not yet (blocking: call it off the event loop)."""
        with self._lock:
            if self.inner is None:
                try:
                    self.inner = self._open()
                except Exception as e:
                    raise SearcherOpenError(f"could not open {self._what}: {type(e).__name__}: {e}") from e
            return self.inner

    async def aopen(self) -> Searcher:
        """The searcher, opened in a worker thread if it is not yet (the search guard awaits this
        before its timed attempts: opening is not searching)."""
        return self.inner if self.inner is not None else await asyncio.to_thread(self.opened)

    async def asearch(self, query: str, k: int = 3) -> list[Passage]:
        return await (await self.aopen()).asearch(query, k)

    @property
    def embedder(self) -> Any:
        """The encoder of the store behind it once open (the passage resolver scores with it)."""
        inner = self.inner
        return getattr(inner, "embedder", None) or getattr(getattr(inner, "store", None), "embedder", None)

    def store_names(self) -> list[str]:
        return list(self._names)

    def info(self) -> list[dict[str, Any]]:
        if self.inner is None:
            return [{"name": n, "opened": False} for n in self._names]
        return describe_searcher(self.inner)
