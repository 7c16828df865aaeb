"""``search`` and ``asearch`` for anything with a ``search_batch``: concurrent async single
queries arriving together share one ``search_batch`` call (the Chroma and sharded stores, the
``/retrieve`` client; the two stores also share ``search_batch``: one encoder call, then vectors).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Hashable, Sequence
from typing import TYPE_CHECKING

import numpy as np

from parallelsearch.stores.coalesce import BatchCoalescer
from parallelsearch.stores.errors import at_least
from parallelsearch.stores.passages import Passage

if TYPE_CHECKING:
    from parallelsearch.stores.encoding.embedder import Embedder


class CoalescedSearch(ABC):
    """Subclasses define ``search_batch`` and call ``super().__init__()``."""

    def __init__(self) -> None:
        self._coalescer: BatchCoalescer[int, list[Passage]] = BatchCoalescer(self._search_k)

    @abstractmethod
    def search_batch(self, queries: Sequence[str], k: int = 3) -> list[list[Passage]]: ...

    def search(self, query: str, k: int = 3) -> list[Passage]:
        return self.search_batch([query], k)[0]

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
