"""Coalesce concurrent single-item async calls into one batched call.

The graph sends one searcher node per sub-query; they run as concurrent tasks on one
event loop. Each task submits its query here; everything submitted within ``window_s``
of the first is handed to one ``batch_fn`` call (run in a worker thread so the loop
stays free), and each caller gets its own result back. k sub-queries => 1 encoder call.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

Q = TypeVar("Q")
R = TypeVar("R")


class BatchCoalescer(Generic[Q, R]):
    """Group concurrent :meth:`submit` calls that share a key into one ``batch_fn(key, items)`` call."""

    def __init__(
        self, batch_fn: Callable[[Hashable, list[Q]], list[R]], window_s: float = 0.002, max_batch: int = 256
    ):
        self._batch_fn = batch_fn
        self._window_s = window_s
        self._max_batch = max_batch
        # pending batches per (event loop, key): futures are bound to the loop that made them
        self._pending: dict[tuple[int, Hashable], list[tuple[Q, asyncio.Future]]] = {}
        self.batches = 0  # number of batch_fn calls made (tests and benchmarks read it)

    async def submit(self, key: Hashable, item: Q) -> R:
        loop = asyncio.get_running_loop()
        slot = (id(loop), key)
        fut: asyncio.Future = loop.create_future()
        batch = self._pending.get(slot)
        if batch is None:
            batch = self._pending[slot] = []
            loop.call_later(self._window_s, lambda: loop.create_task(self._flush(slot)))
        batch.append((item, fut))
        if len(batch) >= self._max_batch:
            loop.create_task(self._flush(slot))
        return await fut

    async def _flush(self, slot: tuple[int, Hashable]) -> None:
        batch = self._pending.pop(slot, None)
        if not batch:
            return
        self.batches += 1
        items = [item for item, _ in batch]
        try:
            results = await asyncio.to_thread(self._batch_fn, slot[1], items)
            if len(results) != len(items):
                raise RuntimeError(f"batch function returned {len(results)} results for {len(items)} items")
        except BaseException as e:  # every waiter learns about the failure
            for _, fut in batch:
                if not fut.done():
                    fut.set_exception(e)
            return
        for (_, fut), res in zip(batch, results, strict=True):
            if not fut.done():
                fut.set_result(res)
