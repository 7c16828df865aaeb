"""Sync forms of the async nodes: ``invoke``, ``stream`` and ``batch`` run them on one background
event loop, because the parts below keep per-loop state (the store's coalescer, HTTP clients'
connections) that a new loop per call would lose. Those coroutines see ``SYNC_RUN`` set, so a chat
model takes its own sync path (its async client would bind to this loop).
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from parallelsearch.agents.policies.base import SYNC_RUN

T = TypeVar("T")

_lock = threading.Lock()
_loop: asyncio.AbstractEventLoop | None = None


def background_loop() -> asyncio.AbstractEventLoop:
    """The process's one loop for sync graph calls (a daemon thread, started on first use)."""
    global _loop
    with _lock:
        if _loop is None or _loop.is_closed():
            loop = asyncio.new_event_loop()
            threading.Thread(target=loop.run_forever, name="parallelsearch-sync-loop", daemon=True).start()
            _loop = loop
        return _loop


def sync_node(afunc: Callable[..., Coroutine[Any, Any, T]]) -> Callable[..., T]:
    """The sync twin of an async node, with the same signature (LangGraph reads it to pass
    ``config`` and ``runtime``), run on the background loop (its exception is raised here)."""

    @functools.wraps(afunc)
    def func(*args: Any, **kwargs: Any) -> T:
        loop = background_loop()
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            raise RuntimeError(
                "a sync graph call was made from the background loop itself; use ainvoke there"
            )
        token = SYNC_RUN.set(True)  # copied into the coroutine's task on the background loop
        try:
            return asyncio.run_coroutine_threadsafe(afunc(*args, **kwargs), loop).result()
        finally:
            SYNC_RUN.reset(token)

    return func


async def run_sync_hook(hook: Callable[[Any, Callable[[Any], Any]], T], request: Any, handler: Any) -> T:
    """A sync-only middleware hook (``wrap_model_call``, ``wrap_tool_call``) awaited from the
    loop: it runs in a thread of its own, never one of the loop's shared worker threads, because
    it blocks on its handler, and the handler's work may itself need those workers (a sync
    searcher, a sync ``before_model`` node): many episodes at once would otherwise take every
    worker and wait forever. Its handler hands each call back to this loop; cancelling the await
    (an episode's deadline) cancels the call the thread waits on, so the thread ends too."""
    loop = asyncio.get_running_loop()
    pending: set[Any] = set()
    done: asyncio.Future[T] = loop.create_future()

    def sync_handler(req: Any) -> Any:
        work = asyncio.run_coroutine_threadsafe(handler(req), loop)
        pending.add(work)
        try:
            return work.result()
        finally:
            pending.discard(work)

    def settle(ok: bool, value: Any) -> None:
        if not done.done():
            done.set_result(value) if ok else done.set_exception(value)

    def run() -> None:
        try:
            outcome = (True, hook(request, sync_handler))
        except BaseException as e:  # noqa: BLE001 - handed to the awaiting task as it is
            outcome = (False, e)
        try:
            loop.call_soon_threadsafe(settle, *outcome)
        except RuntimeError:  # the loop closed while the hook ran: nobody waits for it
            pass

    context = contextvars.copy_context()
    name = f"sync-hook-{getattr(hook, '__qualname__', 'hook')}"
    threading.Thread(target=context.run, args=(run,), name=name, daemon=True).start()
    try:
        return await done
    finally:
        for work in list(pending):
            work.cancel()
