"""Admission control for the LangServe app: a cap on graph runs in flight and a bounded FIFO queue.

A burst beyond the cap should wait a moment, not be refused: a request that finds every slot
taken waits in a first-in, first-out queue and is refused (429, ``Retry-After``) only when the
queue is full or its wait expires. A batch holds one slot per input, at most the whole cap.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field

#: what ``stats()`` reports (for ``/health`` and the tests), each an attribute of the queue
STATS = (
    "limit queue_size max_wait_s in_flight waiting admitted queued refused_full refused_expired gone".split()
)


class Refused(Exception):
    """Not admitted: ``reason`` says why; ``retry_after_s`` is the advice for the client."""

    def __init__(self, reason: str, retry_after_s: int):
        super().__init__(reason)
        self.reason, self.retry_after_s = reason, retry_after_s


class ClientGone(Exception):
    """The client disconnected while its request waited in the queue."""


@dataclass(eq=False)
class _Waiter:
    weight: int
    future: asyncio.Future = field(repr=False)


class AdmissionQueue:
    """Up to ``limit`` slots in use; up to ``queue_size`` requests wait, each at most ``max_wait_s``.

    ``async with queue.slot(weight): ...`` holds the slots for the block; ``stats()`` counts.
    """

    def __init__(self, limit: int, queue_size: int, max_wait_s: float):
        self.limit = max(1, limit)
        self.queue_size = max(0, queue_size)
        self.max_wait_s = max(0.0, max_wait_s)
        self.in_flight = 0
        self._waiters: deque[_Waiter] = deque()
        self._hold_s = 1.0  # running mean of how long a slot is held (for Retry-After)
        self.admitted = self.queued = self.refused_full = self.refused_expired = self.gone = 0

    @property
    def waiting(self) -> int:
        return len(self._waiters)

    def stats(self) -> dict[str, float | int]:
        return {k: getattr(self, k) for k in STATS}

    def retry_after_s(self) -> int:
        """Seconds until the backlog ahead has likely drained (at least 1, at most 120)."""
        backlog = self.in_flight + sum(w.weight for w in self._waiters)
        return int(min(120, max(1, math.ceil(backlog / self.limit * self._hold_s))))

    @contextlib.asynccontextmanager
    async def slot(
        self, weight: int = 1, *, gone: Callable[[], Awaitable[object]] | None = None
    ) -> AsyncIterator[None]:
        """Hold ``weight`` slots for the block; :class:`Refused` or :class:`ClientGone` when not admitted.

        ``gone``: an awaitable that completes when the client disconnects, awaited while the request
        waits, so a request whose client left is dropped instead of run for no one."""
        weight = min(max(1, weight), self.limit)
        await self._acquire(weight, gone)
        t0 = time.monotonic()
        try:
            yield
        finally:
            held = time.monotonic() - t0
            self._hold_s += 0.1 * (held - self._hold_s)
            self._release(weight)

    async def _acquire(self, weight: int, gone: Callable[[], Awaitable[object]] | None) -> None:
        if not self._waiters and self.in_flight + weight <= self.limit:
            self.in_flight += weight
            self.admitted += 1
            return
        if len(self._waiters) >= self.queue_size:
            self.refused_full += 1
            raise Refused(
                f"the server is at its limit of {self.limit} requests in flight and its queue of "
                f"{self.queue_size} is full; retry later",
                self.retry_after_s(),
            )
        waiter = _Waiter(weight, asyncio.get_running_loop().create_future())
        self._waiters.append(waiter)
        self.queued += 1
        watch = asyncio.ensure_future(gone()) if gone is not None else None
        try:
            waits = {waiter.future} | ({watch} if watch else set())
            await asyncio.wait(waits, timeout=self.max_wait_s, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            self._leave(waiter)
            raise
        finally:
            if watch is not None and not watch.done():
                watch.cancel()
        if waiter.future.done():
            self.admitted += 1
            return
        self._leave(waiter)
        if watch is not None and watch.done():
            self.gone += 1
            raise ClientGone
        self.refused_expired += 1
        raise Refused(
            f"waited {self.max_wait_s:g} s in the queue for one of {self.limit} slots; retry later",
            self.retry_after_s(),
        )

    def _leave(self, waiter: _Waiter) -> None:
        """Take ``waiter`` out of the queue; slots it was handed at the last moment go back."""
        if waiter.future.done() and not waiter.future.cancelled():
            self._release(waiter.weight)
            return
        waiter.future.cancel()
        with contextlib.suppress(ValueError):
            self._waiters.remove(waiter)
        self._wake()  # a heavy request that left the head may have been blocking lighter ones

    def _release(self, weight: int) -> None:
        self.in_flight -= weight
        self._wake()

    def _wake(self) -> None:
        while self._waiters and self.in_flight + self._waiters[0].weight <= self.limit:
            waiter = self._waiters.popleft()
            if waiter.future.done():  # cancelled: its request already left
                continue
            self.in_flight += waiter.weight
            waiter.future.set_result(None)
