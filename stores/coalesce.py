"""Coalesce concurrent async calls into batched calls.

The graph sends one searcher node per sub-query; they run as concurrent tasks on one
event loop. Each task submits its query here; everything submitted within ``window_s``
of the first is handed to one ``batch_fn`` call (run in a worker thread so the loop
stays free), and each caller gets its own result back. k sub-queries => 1 encoder call.

The window is also what merges searches from concurrent episodes (the RL environment
runs many on one loop; a server answers many requests) into one encoder call. Closing
a batch early, as soon as one episode's sub-queries were in, was tried: it helped a lone
episode a little, but batches were then cut at 1-2 queries and environment throughput
stopped growing with concurrency (docs/performance.md, "Left alone").

Serial mode (``max_in_flight=1``, what the ``/retrieve`` server uses, see
:mod:`parallelsearch.stores.http.request_batching`): at most one batch runs per key; what
arrives meanwhile waits and leaves as the next batch the moment the running one is done,
so under load the batch grows with the load and costs no timer. A batch leaves when the
encoder is free and it holds as many items as the largest batch of the last
``recent_s`` seconds (with N clients in a closed loop, that is N), or ``window_s`` after
the encoder became free, whichever is first. An idle server therefore sends a lone
request at once (no window), and a loaded one is not cut into a 1-item batch followed by
an (N-1)-item batch. Every batch holds at most ``max_batch`` items.
"""

from __future__ import annotations

import asyncio
import weakref
from collections import deque
from collections.abc import Callable, Hashable, Sequence
from typing import Generic, TypeVar

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

    ``max_in_flight=None`` (the default, the stores' coalescing): a batch closes ``window_s``
    after its first item or at ``max_batch`` items, and batches run concurrently.
    ``max_in_flight=1``: serial mode, described in the module docstring.
    """

    def __init__(
        self,
        batch_fn: Callable[[Hashable, list[Q]], list[R]],
        window_s: float = 0.002,
        max_batch: int = 256,
        *,
        max_in_flight: int | None = None,
        recent_s: float = 0.5,
    ):
        if max_batch < 1:
            raise ValueError(f"max_batch must be >= 1, got {max_batch}")
        if window_s < 0:
            raise ValueError(f"window_s must be >= 0, got {window_s}")
        if max_in_flight is not None and max_in_flight < 1:
            raise ValueError(f"max_in_flight must be >= 1 or None, got {max_in_flight}")
        self._batch_fn = batch_fn
        self._window_s = window_s
        self._max_batch = max_batch
        self._max_in_flight = max_in_flight
        self._recent_s = recent_s
        # queues per event loop and key: futures are bound to the loop that made them, and a
        # closed loop's queues go with it
        self._slots: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[Hashable, _Slot]] = (
            weakref.WeakKeyDictionary()
        )
        self.batches = 0  # number of batch_fn calls made (tests and benchmarks read it)
        self.largest_batch = 0  # most items one batch_fn call got
        self._running: set[asyncio.Task] = set()  # the loop keeps only weak references to tasks

    async def submit(self, key: Hashable, item: Q) -> R:
        return (await self.submit_many(key, [item]))[0]

    async def submit_many(self, key: Hashable, items: Sequence[Q]) -> list[R]:
        """Results of ``items``, in order; they join the open batch together (split at ``max_batch``).

        If a batch holding some of them fails, this raises that batch's exception.
        """
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
        self._dispatch(loop, key, slot)
        results = await asyncio.gather(*futs, return_exceptions=True)
        for res in results:
            if isinstance(res, BaseException):
                raise res
        return list(results)

    # ---- scheduling ----------------------------------------------------------------------
    def _dispatch(self, loop: asyncio.AbstractEventLoop, key: Hashable, slot: _Slot) -> None:
        """Send what may leave now; arm the timer for what must wait."""
        if self._max_in_flight is None:
            self._dispatch_windowed(loop, key, slot)
        else:
            self._dispatch_serial(loop, key, slot)

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
        self.largest_batch = max(self.largest_batch, len(batch))
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
