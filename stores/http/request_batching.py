"""Cross-request batching for the ``/retrieve`` server: concurrent requests share one search.

Without it every request made its own ``search_batch`` call, so under N concurrent clients the
server ran N small encoder calls one after the other, far below what the encoder does at its best
batch size (docs/performance.md, "Figures behind the code's choices"). Here each request's queries join the
queue of a serial :class:`~parallelsearch.stores.coalesce.BatchCoalescer`: one batch runs at a
time, what arrives meanwhile leaves together as the next batch (at most ``max_batch`` queries),
and an idle server sends a lone request at once. With ``concurrent_batches=n`` (the server's
default: one per encoder thread, plus one with ONNX,
:func:`~parallelsearch.stores.http.retrieval_server.default_concurrent_batches`) up to ``n`` batches
run at once, so one encodes while the requests of another are answered.

Requests may ask for different ``topk``: a batch is searched once with the largest ``k``
in it, and each query's list is cut to its own ``k`` (a Chroma top-k is the prefix of the
top-k' for k < k', as long as k' stays under the index's ``ef_search``, 100 by default).
A batch that fails fails the requests that had queries in it, with the cause named.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Protocol

from parallelsearch.stores.coalesce import BatchCoalescer
from parallelsearch.stores.errors import ParallelSearchError
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
        if concurrent_batches < 1:
            raise ValueError(f"concurrent_batches must be >= 1, got {concurrent_batches}")
        self.searcher = searcher
        self.max_batch = max_batch
        self.concurrent_batches = concurrent_batches
        self._coalescer: BatchCoalescer[tuple[str, int], list[Passage]] = BatchCoalescer(
            self._search, max_batch=max_batch, max_in_flight=concurrent_batches
        )

    @property
    def batches(self) -> int:
        """How many ``search_batch`` calls were made (tests and benchmarks read it)."""
        return self._coalescer.batches

    @property
    def largest_batch(self) -> int:
        return self._coalescer.largest_batch

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
