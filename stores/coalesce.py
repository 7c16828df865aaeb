"""Coalesce concurrent async calls into batched calls.

The graph's searcher nodes, concurrent RL episodes and server requests run as tasks on one
event loop; each submits its query here, and everything submitted within ``window_s`` of the
first goes to one ``batch_fn`` call on a worker thread: k sub-queries, one encoder call.

Serial mode (``max_in_flight=1``, the ``/retrieve`` server's): one batch runs per key; a batch
leaves when the encoder is free and it holds as many items as the largest batch of the last
``recent_s`` seconds, or ``window_s`` after the encoder became free. An idle server sends a
lone request at once, a loaded one is not cut into 1 + (N-1) batches. At most ``max_batch`` items.
"""

from __future__ import annotations

import asyncio
import weakref
from collections import deque
from collections.abc import Callable, Hashable, Sequence
from typing import Generic, TypeVar

from parallelsearch.stores.errors import at_least

Q = TypeVar("Q")
R = TypeVar("R")


class _Slot:
    """The queue and the running count of one (event loop, key)."""

    __slots__ = ("queue", "in_flight", "free_since", "timer", "recent")

    def __init__(self) -> None:
        self.queue: list[tuple[object, asyncio.Future, float]] = []  # (item, future, loop time queued)
        self.in_flight = 0
        self.free_since = 0.0  # loop time when the last running batch finished (serial mode)
        self.timer: asyncio.TimerHandle | None = None
        self.recent: deque[tuple[float, int]] = deque()  # (loop time, size) of recent batches


class BatchCoalescer(Generic[Q, R]):
    """Group concurrent :meth:`submit` calls that share a key into one ``batch_fn(key, items)`` call.
    ``max_in_flight=None``: a batch closes ``window_s`` after its first item or at ``max_batch``
    items, and batches run concurrently; ``1``: serial mode (module docstring)."""

    def __init__(
        self,
        batch_fn: Callable[[Hashable, list[Q]], list[R]],
        window_s: float = 0.002,
        max_batch: int = 256,
        *,
        max_in_flight: int | None = None,
        recent_s: float = 0.5,
    ):
        at_least("max_batch", max_batch)
        at_least("window_s", window_s, 0)
        at_least("max_in_flight", max_in_flight, none_ok=True)
        self._batch_fn = batch_fn
        self._window_s = window_s
        self._max_batch = max_batch
        self._max_in_flight = max_in_flight
        self._recent_s = recent_s
        # per event loop (futures are bound to theirs; a closed loop's queues go with it) and key
        self._slots: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[Hashable, _Slot]] = (
            weakref.WeakKeyDictionary()
        )
        self.batches = 0  # number of batch_fn calls made (tests and benchmarks read it)
        self._running: set[asyncio.Task] = set()  # the loop keeps only weak references to tasks

    async def submit(self, key: Hashable, item: Q) -> R:
        return (await self.submit_many(key, [item]))[0]

    async def submit_many(self, key: Hashable, items: Sequence[Q]) -> list[R]:
        """Results of ``items``, in order, joining the open batch together (split at ``max_batch``); a
        failing batch's exception is raised."""
        if not items:
            return []
        loop = asyncio.get_running_loop()
        slot = self._slots.setdefault(loop, {}).setdefault(key, _Slot())
        futs = []
        now = loop.time()
        for item in items:
            fut: asyncio.Future = loop.create_future()
            slot.queue.append((item, fut, now))
            futs.append(fut)
        if self._max_in_flight is None:
            self._dispatch_windowed(loop, key, slot)
        else:
            self._dispatch_serial(loop, key, slot)
        results = await asyncio.gather(*futs, return_exceptions=True)
        for res in results:
            if isinstance(res, BaseException):
                raise res
        return list(results)

    def _dispatch_windowed(self, loop, key, slot: _Slot) -> None:
        """A full batch leaves now; the rest waits for the window opened by its first item."""
        while len(slot.queue) >= self._max_batch:
            self._cancel_timer(slot)
            self._start(loop, key, slot, self._max_batch)
        if slot.queue and slot.timer is None:
            slot.timer = loop.call_later(self._window_s, self._on_timer, loop, key, slot)

    def _dispatch_serial(self, loop, key, slot: _Slot) -> None:
        assert self._max_in_flight is not None
        now = loop.time()
        while slot.queue and slot.in_flight < self._max_in_flight:
            while slot.recent and now - slot.recent[0][0] > self._recent_s:
                slot.recent.popleft()
            target = min(self._max_batch, max((n for _, n in slot.recent), default=1))
            waited = now - max(slot.free_since, slot.queue[0][2])
            if len(slot.queue) >= target or waited >= self._window_s:
                self._start(loop, key, slot, self._max_batch)
                continue
            if slot.timer is None:
                slot.timer = loop.call_later(self._window_s - waited, self._on_timer, loop, key, slot)
            return

    @staticmethod
    def _cancel_timer(slot: _Slot) -> None:
        if slot.timer is not None:
            slot.timer.cancel()
            slot.timer = None

    def _on_timer(self, loop, key, slot: _Slot) -> None:
        slot.timer = None
        if self._max_in_flight is None:
            if slot.queue:
                self._start(loop, key, slot, self._max_batch)
            self._dispatch_windowed(loop, key, slot)
        else:
            self._dispatch_serial(loop, key, slot)

    def _start(self, loop, key, slot: _Slot, n: int) -> None:
        batch, slot.queue = slot.queue[:n], slot.queue[n:]
        if self._max_in_flight is not None:
            self._cancel_timer(slot)
        slot.in_flight += 1
        slot.recent.append((loop.time(), len(batch)))
        task = loop.create_task(self._run(loop, key, slot, batch))
        self._running.add(task)
        task.add_done_callback(self._running.discard)

    async def _run(self, loop, key: Hashable, slot: _Slot, batch: list) -> None:
        self.batches += 1
        items = [item for item, _, _ in batch]
        try:
            try:
                results = await asyncio.to_thread(self._batch_fn, key, items)
                if len(results) != len(items):
                    raise RuntimeError(
                        f"batch function returned {len(results)} results for {len(items)} items"
                    )
            except BaseException as e:  # every waiter of this batch learns about the failure
                for _, fut, _ in batch:
                    if not fut.done():
                        fut.set_exception(e)
                return
            for (_, fut, _), res in zip(batch, results, strict=True):
                if not fut.done():
                    fut.set_result(res)
        finally:
            slot.in_flight -= 1
            slot.free_since = loop.time()
            if self._max_in_flight is not None:
                self._dispatch_serial(loop, key, slot)
