"""Coalesce concurrent single-item async calls into one batched call.

The graph sends one searcher node per sub-query; they run as concurrent tasks on one
event loop. Each task submits its query here; everything submitted within ``window_s``
of the first is handed to one ``batch_fn`` call (run in a worker thread so the loop
stays free), and each caller gets its own result back. k sub-queries => 1 encoder call.

The window is also what merges searches from concurrent episodes (the RL environment
runs many on one loop; a server answers many requests) into one encoder call. Closing
a batch early, as soon as one episode's sub-queries were in, was tried: it saved ~1-2 ms
for a lone episode, but batches were then cut at 1-2 queries and environment throughput
stopped growing with concurrency (benchmarks/env.py, embedded store: 15 / 13 / 14
episodes/s at 1 / 8 / 32 concurrent episodes, against 12-20 / 20-42 / 28-41 with the window).
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
        self._running: set[asyncio.Task] = set()  # the loop keeps only weak references to tasks

    async def submit(self, key: Hashable, item: Q) -> R:
        loop = asyncio.get_running_loop()
        slot = (id(loop), key)
        fut: asyncio.Future = loop.create_future()
        batch = self._pending.get(slot)
        if batch is None:
            batch = self._pending[slot] = []
            loop.call_later(self._window_s, self._flush_soon, loop, slot, batch)
        batch.append((item, fut))
        if len(batch) >= self._max_batch:
            self._flush_soon(loop, slot, batch)
        return await fut

    def _flush_soon(self, loop: asyncio.AbstractEventLoop, slot: tuple[int, Hashable], batch: list) -> None:
        """Close ``batch`` (if it is still the open one for ``slot``) and run it in a task."""
        if self._pending.get(slot) is batch:
            del self._pending[slot]
            task = loop.create_task(self._run(slot[1], batch))
            self._running.add(task)
            task.add_done_callback(self._running.discard)

    async def _run(self, key: Hashable, batch: list[tuple[Q, asyncio.Future]]) -> None:
        self.batches += 1
        items = [item for item, _ in batch]
        try:
            results = await asyncio.to_thread(self._batch_fn, key, items)
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
