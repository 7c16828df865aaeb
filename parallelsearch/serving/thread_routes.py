"""Persistent threads for the LangServe app, which has no notion of them: a request naming
``configurable.thread_id`` runs on a checkpointed graph, any other on the plain one
(docs/architecture.md, "Threads")."""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Mapping
from typing import Any, Protocol

from langchain_core.runnables import Runnable, RunnableConfig
from langchain_core.runnables.config import merge_configs

from parallelsearch.stores.errors import check_choice, checked_name

#: what a thread id may look like (UUIDs, slugs); anything else is a 422, not a database key
THREAD_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}$")
#: bound on reading a thread back (the database is the only I/O)
READ_TIMEOUT_S = 30.0


def thread_id_of(config: Mapping[str, Any] | None) -> str | None:
    """The request's ``configurable.thread_id``, or None."""
    tid = ((config or {}).get("configurable") or {}).get("thread_id")
    return None if tid in (None, "") else tid


def check_thread_id(thread_id: Any) -> str:
    return checked_name(
        thread_id,
        THREAD_ID,
        "thread_id {value!r} is not a valid id: 1-128 characters of letters, digits and ._:@- "
        "(e.g. a UUID), starting with a letter or digit",
    )


class ThreadRouted(Runnable):
    """A served graph that runs on the checkpointed copy when the request names a thread.

    Schemas are the plain graph's, so LangServe's validation, ``/docs`` and playground see one
    graph; ``with_config`` copies share the root's graphs (LangServe reads schemas through them).
    """

    def __init__(self, stateless: Any):
        self.stateless = stateless
        self.name = getattr(stateless, "name", None)
        self._root = self
        self._bound: RunnableConfig = {}
        self._threaded: Any = None

    @property
    def threaded(self) -> Any:
        return self._root._threaded

    @threaded.setter
    def threaded(self, graph: Any) -> None:
        self._root._threaded = graph

    def with_config(self, config: RunnableConfig | None = None, **kwargs: Any) -> ThreadRouted:
        bound = ThreadRouted(self._root.stateless.with_config(merge_configs(self._bound, config), **kwargs))
        bound._root = self._root
        bound._bound = merge_configs(self._bound, config, kwargs)  # type: ignore[arg-type]  # langchain_core types merge_configs' kwargs loosely
        return bound

    # -- what LangServe reads: the plain graph's schemas ------------------------------
    @property
    def config(self) -> dict[str, Any]:
        return dict(getattr(self.stateless, "config", None) or {})

    @property
    def InputType(self) -> Any:  # noqa: N802 - LangChain's name
        return self.stateless.InputType

    @property
    def OutputType(self) -> Any:  # noqa: N802 - LangChain's name
        return self.stateless.OutputType

    def get_input_schema(self, config: RunnableConfig | None = None) -> Any:
        return self.stateless.get_input_schema(config)

    def get_output_schema(self, config: RunnableConfig | None = None) -> Any:
        return self.stateless.get_output_schema(config)

    def config_schema(self, *, include: Any = None) -> Any:
        return self.stateless.config_schema(include=include)

    def get_config_jsonschema(self, *, include: Any = None) -> dict[str, Any]:
        return self.stateless.get_config_jsonschema(include=include)

    # -- running -----------------------------------------------------------------------
    def pick(self, config: RunnableConfig | None) -> tuple[Any, RunnableConfig]:
        """The graph for this request (the checkpointed one when it names a thread) and its config."""
        merged = merge_configs(self._bound, config)
        tid = thread_id_of(merged)
        if tid is None:
            return self._root.stateless, merged
        check_thread_id(tid)
        if self.threaded is None:
            raise RuntimeError("threads are not open yet (the app's lifespan attaches them)")
        return self.threaded, merged

    def invoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Any:
        graph, cfg = self.pick(config)
        return graph.invoke(input, cfg, **kwargs)

    async def ainvoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Any:
        graph, cfg = self.pick(config)
        return await graph.ainvoke(input, cfg, **kwargs)

    async def abatch(
        self,
        inputs: list[Any],
        config: RunnableConfig | list[RunnableConfig] | None = None,
        *,
        return_exceptions: bool = False,
        **kwargs: Any,
    ) -> list[Any]:
        """Every input as :meth:`ainvoke` would run it; inputs naming one thread run one after
        another in their order (runs at once would each start from the thread's last checkpoint,
        and the thread would keep only one of their episodes); other inputs run at once."""
        from langchain_core.runnables.config import get_config_list

        configs = get_config_list(config, len(inputs))
        lanes: dict[Any, list[int]] = {}
        for i, cfg in enumerate(configs):
            tid = thread_id_of(merge_configs(self._bound, cfg))
            lanes.setdefault(("thread", tid) if tid is not None else ("input", i), []).append(i)
        results: list[Any] = [None] * len(inputs)

        async def run(lane: list[int]) -> None:
            for i in lane:
                try:
                    results[i] = await self.ainvoke(inputs[i], configs[i], **kwargs)
                except Exception as e:
                    if not return_exceptions:
                        raise
                    results[i] = e

        await asyncio.gather(*(run(lane) for lane in lanes.values()))
        return results

    def stream(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Iterator[Any]:
        graph, cfg = self.pick(config)
        yield from graph.stream(input, cfg, **kwargs)

    async def astream(
        self, input: Any, config: RunnableConfig | None = None, **kwargs: Any
    ) -> AsyncIterator[Any]:
        graph, cfg = self.pick(config)
        async for chunk in graph.astream(input, cfg, **kwargs):
            yield chunk

    def astream_events(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Any:
        graph, cfg = self.pick(config)
        return graph.astream_events(input, cfg, **kwargs)

    def astream_log(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Any:
        graph, cfg = self.pick(config)
        return graph.astream_log(input, cfg, **kwargs)


def thread_config_modifier(keeps_threads: bool) -> Callable[[dict[str, Any], Any], dict[str, Any]]:
    """LangServe's per-request hook: a bad ``thread_id`` is a 422, and one sent to a server
    that keeps no threads is a 400 instead of being dropped silently."""
    from fastapi import HTTPException

    def modify(config: dict[str, Any], request: Any) -> dict[str, Any]:
        tid = thread_id_of(config)
        if tid is None:
            return config
        if not keeps_threads:
            raise HTTPException(
                400, "this server keeps no threads (server_checkpointer=none); send no thread_id"
            )
        _check_or_422(tid)
        return config

    return modify


def _check_or_422(thread_id: Any) -> None:
    from fastapi import HTTPException

    try:
        check_thread_id(thread_id)
    except ValueError as e:
        raise HTTPException(422, str(e)) from e


def threads_lifespan(
    kind: str,
    target: str | None,
    routers: Mapping[str, ThreadRouted],
    build: Callable[[str, Any], Any],
    locks: ThreadLocks | None = None,
) -> Callable[[Any], Any]:
    """The app's lifespan: open the checkpointer, compile each route's checkpointed graph
    with it (``build(route, checkpointer)``), attach the cross-process thread lock to ``locks``
    (Postgres), close them on shutdown."""
    from parallelsearch.serving.checkpointers import open_checkpointer, open_thread_lock

    @contextlib.asynccontextmanager
    async def lifespan(app: Any) -> AsyncIterator[None]:
        async with open_checkpointer(kind, target) as saver, open_thread_lock(kind, target) as shared:
            for route, router in routers.items():
                router.threaded = build(route, saver) if saver is not None else None
            if locks is not None:
                locks.shared = shared
            try:
                yield
            finally:
                for router in routers.values():
                    router.threaded = None
                if locks is not None:
                    locks.shared = None

    return lifespan


def _summary(snapshot: Any) -> dict[str, Any]:
    values = snapshot.values or {}
    meta = snapshot.metadata or {}
    return {
        "checkpoint_id": snapshot.config["configurable"].get("checkpoint_id"),
        "step": meta.get("step"),
        "source": meta.get("source"),
        "created_at": snapshot.created_at,
        "next": list(snapshot.next),
        "question": values.get("question"),
        "status": values.get("status"),
        "answer": values.get("answer"),
        "episodes": len(values.get("history") or []),
    }


def add_thread_routes(app: Any, routers: Mapping[str, ThreadRouted]) -> None:
    """``GET /{route}/threads/{thread_id}`` and ``GET /{route}/threads/{thread_id}/history``."""
    from fastapi import HTTPException, Query
    from fastapi.encoders import jsonable_encoder

    def graph_of(route: str, thread_id: str) -> tuple[Any, RunnableConfig]:
        _check_or_422(thread_id)
        graph = routers[route].threaded
        if graph is None:
            raise HTTPException(503, "threads are not open (the server is starting or stopping)")
        return graph, {"configurable": {"thread_id": thread_id}}

    def register(route: str) -> None:
        @app.get(f"/{route}/threads/{{thread_id}}", tags=["threads"], name=f"{route}_thread_state")
        async def thread_state(thread_id: str) -> Any:
            """The thread's latest state: values (the last episode, ``history`` for all), next nodes."""
            graph, cfg = graph_of(route, thread_id)
            snap = await asyncio.wait_for(graph.aget_state(cfg), READ_TIMEOUT_S)
            if snap.created_at is None:
                raise HTTPException(404, f"no thread {thread_id!r} on this server")
            return jsonable_encoder({"thread_id": thread_id, **_summary(snap), "values": snap.values})

        @app.get(f"/{route}/threads/{{thread_id}}/history", tags=["threads"], name=f"{route}_thread_history")
        async def thread_history(thread_id: str, limit: int = Query(20, ge=1, le=200)) -> Any:
            """The thread's checkpoints, newest first (question, status and answer of each)."""
            graph, cfg = graph_of(route, thread_id)

            async def collect() -> list[dict[str, Any]]:
                return [_summary(s) async for s in graph.aget_state_history(cfg, limit=limit)]

            rows = await asyncio.wait_for(collect(), READ_TIMEOUT_S)
            if not rows:
                raise HTTPException(404, f"no thread {thread_id!r} on this server")
            return jsonable_encoder({"thread_id": thread_id, "checkpoints": rows})

    for route in routers:
        register(route)


# -- one run per thread at a time ---------------------------------------------------------------
class ThreadBusy(Exception):
    """A thread has a run in flight: ``status`` (409 reject, 429 an expired wait) and ``detail``."""

    def __init__(self, status: int, detail: str, retry_after_s: int = 1):
        super().__init__(detail)
        self.status, self.detail, self.retry_after_s = status, detail, retry_after_s


class SharedThreadLock(Protocol):
    """A lock every server process sharing the threads sees (Postgres: an advisory lock)."""

    async def try_lock(self, thread_id: str) -> bool: ...

    async def unlock(self, thread_id: str) -> None: ...


class ThreadLocks:
    """Runs on one thread go one at a time, like the Agent Server's ``multitask_strategy``: two runs
    that both start from the thread's last checkpoint would each write their own next one, and
    the thread would keep only one episode. ``enqueue`` waits (at most ``wait_s``); ``reject`` is a
    409. In one process an ``asyncio.Lock`` per thread; across processes ``shared`` as well."""

    POLL_S = 0.05  # how often a run waiting for another process's lock tries again

    def __init__(self, strategy: str = "enqueue", wait_s: float = 60.0):
        check_choice(strategy, ("enqueue", "reject"), "multitask strategy")
        self.strategy, self.wait_s = strategy, wait_s
        self.shared: SharedThreadLock | None = None  # attached in the lifespan (Postgres)
        self._locks: dict[str, asyncio.Lock] = {}
        self._users: dict[str, int] = {}
        self.waited = self.rejected = 0

    def busy(self, thread_id: str) -> bool:
        lock = self._locks.get(thread_id)
        return lock is not None and lock.locked()

    @contextlib.asynccontextmanager
    async def hold(self, thread_ids: Iterable[str]) -> AsyncIterator[None]:
        """Hold every thread of ``thread_ids`` for the block (in sorted order: no two requests
        wait on each other); :class:`ThreadBusy` when one cannot be had."""
        deadline = asyncio.get_running_loop().time() + self.wait_s
        async with contextlib.AsyncExitStack() as stack:
            for tid in sorted(set(thread_ids)):
                await stack.enter_async_context(self._one(tid, deadline))
            yield

    @contextlib.asynccontextmanager
    async def _one(self, thread_id: str, deadline: float) -> AsyncIterator[None]:
        lock = self._locks.setdefault(thread_id, asyncio.Lock())
        self._users[thread_id] = self._users.get(thread_id, 0) + 1
        try:
            await self._acquire(lock, thread_id, deadline)
            try:
                await self._acquire_shared(thread_id, deadline)
                try:
                    yield
                finally:
                    if self.shared is not None:
                        await self.shared.unlock(thread_id)
            finally:
                lock.release()
        finally:
            self._users[thread_id] -= 1
            if not self._users[thread_id]:  # no run holds or waits for it: forget it
                del self._users[thread_id], self._locks[thread_id]

    def _refusal(self, thread_id: str, waited: bool) -> ThreadBusy:
        if waited:
            return ThreadBusy(
                429, f"thread {thread_id!r} was busy for {self.wait_s:g} s (another run on it); retry later"
            )
        self.rejected += 1
        return ThreadBusy(
            409,
            f"thread {thread_id!r} has a run in flight; retry when it ends "
            "(this server rejects concurrent runs on one thread: server_multitask_strategy=reject)",
        )

    async def _acquire(self, lock: asyncio.Lock, thread_id: str, deadline: float) -> None:
        if self.strategy == "reject" and lock.locked():
            raise self._refusal(thread_id, waited=False)
        if lock.locked():
            self.waited += 1
        left = deadline - asyncio.get_running_loop().time()
        try:  # a free lock is taken within any positive timeout; 0 would refuse even a free one
            await asyncio.wait_for(lock.acquire(), max(0.01, left))
        except TimeoutError:
            raise self._refusal(thread_id, waited=True) from None

    async def _acquire_shared(self, thread_id: str, deadline: float) -> None:
        if self.shared is None:
            return
        loop = asyncio.get_running_loop()
        first = True
        while not await self.shared.try_lock(thread_id):
            if self.strategy == "reject":
                raise self._refusal(thread_id, waited=False)
            self.waited += first  # held by another process
            first = False
            if loop.time() > deadline:
                raise self._refusal(thread_id, waited=True)
            await asyncio.sleep(self.POLL_S)
