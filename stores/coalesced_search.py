"""``search`` and ``asearch`` for anything with a ``search_batch``: concurrent async single
queries arriving together share one ``search_batch`` call (the Chroma and sharded stores, the
``/retrieve`` client; the two stores also share ``search_batch``: one encoder call, then vectors).
"""

from __future__ import annotations

import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Hashable, Sequence
from typing import TYPE_CHECKING

import numpy as np

from parallelsearch.stores.coalesce import BatchCoalescer
from parallelsearch.stores.errors import at_least
from parallelsearch.stores.passages import Passage

if TYPE_CHECKING:
    from parallelsearch.stores.encoding.embedder import Embedder


class _Gathered:
    """The sync searches of one worker-thread batch: their queries, then the results or the error."""

    __slots__ = ("queries", "done", "results", "error")

    def __init__(self) -> None:
        self.queries: list[str] = []
        self.done = threading.Event()
        self.results: list[list[Passage]] = []
        self.error: BaseException | None = None


class CoalescedSearch(ABC):
    """Subclasses define ``search_batch`` and call ``super().__init__()``."""

    def __init__(self) -> None:
        self._coalescer: BatchCoalescer[int, list[Passage]] = BatchCoalescer(self._search_k)
        self._gathering: dict[int, _Gathered] = {}
        self._gather_lock = threading.Lock()

    @abstractmethod
    def search_batch(self, queries: Sequence[str], k: int = 3) -> list[list[Passage]]: ...

    def search(self, query: str, k: int = 3) -> list[Passage]:
        """One query. Sync searches from worker threads arriving within the coalescer's window
        share one ``search_batch`` (one encoder call): a graph runs a round's sync searcher
        functions on threads at once; the main thread searches at once."""
        if threading.current_thread() is threading.main_thread():
            return self.search_batch([query], k)[0]
        return self._gathered_search(query, k)

    def _gathered_search(self, query: str, k: int) -> list[Passage]:
        with self._gather_lock:
            batch = self._gathering.get(k)
            leads = batch is None
            if batch is None:
                batch = self._gathering[k] = _Gathered()
            at = len(batch.queries)
            batch.queries.append(query)
        if leads:
            time.sleep(self._coalescer._window_s)  # the others of the round join meanwhile
            with self._gather_lock:
                del self._gathering[k]
            try:
                batch.results = self.search_batch(batch.queries, k)
            except BaseException as e:  # every caller of the batch gets its error
                batch.error = e
            finally:
                batch.done.set()
        else:
            batch.done.wait()
        if batch.error is not None:
            raise batch.error
        return batch.results[at]

    def _search_k(self, k: Hashable, queries: list[str]) -> list[list[Passage]]:
        return self.search_batch(queries, int(k))  # type: ignore[call-overload]  # the coalescer keys by Hashable; k is the int given

    async def asearch(self, query: str, k: int = 3) -> list[Passage]:
        """Async single query; concurrent calls arriving together share one batched search."""
        return await self._coalescer.submit(k, query)

    @property
    def coalesced_batches(self) -> int:
        return self._coalescer.batches


class VectorSearch(CoalescedSearch):
    """A store that encodes queries with ``embedder`` and searches by vector (``_query_vectors``)."""

    embedder: Embedder

    @abstractmethod
    def _query_vectors(self, vecs: np.ndarray, k: int) -> list[list[Passage]]: ...

    def search_batch(self, queries: Sequence[str], k: int = 3) -> list[list[Passage]]:
        """Top-k for every query with ONE encoder call."""
        at_least("k", k)
        queries = list(queries)
        return self.search_vectors(self.embedder.encode_queries(queries), k) if queries else []

    def search_vectors(self, vecs: np.ndarray, k: int = 3) -> list[list[Passage]]:
        """Top-k for query vectors already encoded with the store's model."""
        at_least("k", k)
        return self._query_vectors(vecs, k) if len(vecs) else []
