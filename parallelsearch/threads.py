"""Persistent threads for the LangServe app, which has no notion of them: a request naming
``configurable.thread_id`` runs on a checkpointed graph, any other on the plain one
(docs/architecture.md, "Threads")."""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from typing import Any

from langchain_core.runnables import Runnable, RunnableConfig
from langchain_core.runnables.config import merge_configs

from parallelsearch.stores.errors import checked_name

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
        bound._bound = merge_configs(self._bound, config, kwargs)  # type: ignore[arg-type]
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
    kind: str, target: str | None, routers: Mapping[str, ThreadRouted], build: Callable[[str, Any], Any]
) -> Callable[[Any], Any]:
    """The app's lifespan: open the checkpointer, compile each route's checkpointed graph
    with it (``build(route, checkpointer)``), close it on shutdown."""
    from parallelsearch.checkpointers import open_checkpointer

    @contextlib.asynccontextmanager
    async def lifespan(app: Any) -> AsyncIterator[None]:
        async with open_checkpointer(kind, target) as saver:
            for route, router in routers.items():
                router.threaded = build(route, saver) if saver is not None else None
            try:
                yield
            finally:
                for router in routers.values():
                    router.threaded = None

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
