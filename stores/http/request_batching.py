"""Cross-request batching for the ``/retrieve`` server: concurrent requests share one search.

Each request's queries join a serial :class:`~parallelsearch.stores.coalesce.BatchCoalescer`, so N
concurrent clients make one encoder call, not N small ones (docs/performance.md, "Figures behind
the code's choices"); up to ``concurrent_batches`` batches run at once. A batch is searched with
its largest ``topk`` and each list cut to its own (a Chroma top-k is a prefix of the top-k' while
k' stays under ``ef_search``). A failing batch fails its requests, with the cause named.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Protocol

from parallelsearch.stores.coalesce import BatchCoalescer
from parallelsearch.stores.errors import ParallelSearchError, at_least
from parallelsearch.stores.passages import Passage


class BatchSearcher(Protocol):
    def search_batch(self, queries: Sequence[str], k: int = 3) -> list[list[Passage]]: ...


class BatchSearchError(ParallelSearchError, RuntimeError):
    """The batched search holding a request's queries failed (the cause is chained)."""


class RequestBatcher:
    """Merges the queries of concurrent requests into one ``searcher.search_batch`` call."""

    def __init__(
        self,
        searcher: BatchSearcher,
        *,
        max_batch: int = 64,
        concurrent_batches: int = 1,
    ) -> None:
        at_least("concurrent_batches", concurrent_batches)
        self.searcher = searcher
        self.max_batch = max_batch
        self.concurrent_batches = concurrent_batches
        self._coalescer: BatchCoalescer[tuple[str, int], list[Passage]] = BatchCoalescer(
            self._search, max_batch=max_batch, max_in_flight=concurrent_batches
        )

    def _search(self, _key: Hashable, items: list[tuple[str, int]]) -> list[list[Passage]]:
        k = max(k for _, k in items)
        try:
            results = self.searcher.search_batch([q for q, _ in items], k)
        except Exception as e:
            raise BatchSearchError(
                f"the batched search of {len(items)} queries from concurrent requests failed: "
                f"{type(e).__name__}: {e}"
            ) from e
        return [res[:kq] for res, (_, kq) in zip(results, items, strict=True)]

    async def search(self, queries: Sequence[str], k: int) -> list[list[Passage]]:
        """Top-``k`` passages for each query, in order, searched together with concurrent requests."""
        return await self._coalescer.submit_many(None, [(q, k) for q in queries])
