"""Sync forms of the async nodes: ``invoke``, ``stream`` and ``batch`` run them on one
background event loop.

The parts below the graph are async and keep per-loop state: the local store's coalescer
gathers the sub-queries arriving on one loop into one encoder call, and HTTP clients (the
``/retrieve`` client, OpenAI's) hold connections bound to the loop that opened them. A new
loop per sync call (``asyncio.run``) would lose both, so every sync node call is handed to
one long-lived loop thread, where the parallel searcher nodes of a round still meet. Those
coroutines see ``SYNC_RUN`` set, so a chat model takes its own sync path (its async client
would bind to this loop and fail on the caller's next ``asyncio.run``).
"""

from __future__ import annotations

import asyncio
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


def run_sync(coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` on the background loop and wait for its result (its exception is raised here)."""
    loop = background_loop()
    try:
        running = asyncio.get_running_loop()
    except RuntimeError:
        running = None
    if running is loop:
        coro.close()
        raise RuntimeError("a sync graph call was made from the background loop itself; use ainvoke there")
    return asyncio.run_coroutine_threadsafe(coro, loop).result()


def sync_node(afunc: Callable[..., Coroutine[Any, Any, T]]) -> Callable[..., T]:
    """The sync twin of an async node, with the same signature (LangGraph reads it to pass
    ``config`` and ``runtime``)."""

    @functools.wraps(afunc)
    def func(*args: Any, **kwargs: Any) -> T:
        token = SYNC_RUN.set(True)  # copied into the coroutine's task on the background loop
        try:
            return run_sync(afunc(*args, **kwargs))
        finally:
            SYNC_RUN.reset(token)

    return func
