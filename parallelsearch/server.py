"""The LangServe deployment: the parallel graph and its baselines behind one FastAPI app.

Routes: ``/parallelsearch``, ``/sequential``, ``/rag`` (LangServe: invoke, batch, stream,
stream_events, input/output schemas, playground), ``GET /health``, ``GET /stores``, the
page ``GET /ui`` (:mod:`parallelsearch.page`) and, when the server keeps threads,
``GET /{route}/threads/{thread_id}[/history]`` (:mod:`parallelsearch.threads`): a request
with ``config.configurable.thread_id`` runs on a checkpointed graph (SQLite by default).

A guard in front of the app (pure ASGI, so streaming is untouched) enforces what a
public endpoint needs: the optional API key (``X-API-Key``), limits on question length
and batch size (4xx with a message), a cap on concurrent requests (429), and any
unhandled error turned into a JSON 500 carrying an id that is also in the log.
"""

from __future__ import annotations

import asyncio
import json
import logging
import uuid
from typing import Any

from fastapi import FastAPI

from parallelsearch import __version__
from parallelsearch.graphs.config import PER_REQUEST_KEYS, GraphConfig
from parallelsearch.settings import Settings, get_settings

log = logging.getLogger("parallelsearch.server")

ROUTES = {"parallelsearch": "parallel", "sequential": "sequential", "rag": "rag"}
MAX_BODY_BYTES = 1_000_000


def _graph_serializer() -> Any:
    """LangServe's serializer, extended for LangGraph's ``Send`` (router outputs appear in stream_events)."""
    import orjson
    from langgraph.types import Send
    from langserve.serialization import WellKnownLCSerializer, default

    def fallback(obj: Any) -> Any:
        if isinstance(obj, Send):
            return {"send": obj.node, "arg": obj.arg}
        return default(obj)

    class GraphSerializer(WellKnownLCSerializer):
        def dumps(self, obj: Any) -> bytes:
            return orjson.dumps(obj, default=fallback)

    return GraphSerializer()


class RequestGuard:
    """API key, input limits, concurrency cap and error ids for the graph routes."""

    def __init__(self, app: Any, settings: Settings):
        self.app = app
        self.s = settings
        self.in_flight = 0

    async def _reply(self, send: Any, status: int, detail: str, **extra: Any) -> None:
        body = json.dumps({"detail": detail, **extra}).encode()
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [(b"content-type", b"application/json")],
            }
        )
        await send({"type": "http.response.body", "body": body})

    def _check_payload(self, path: str, payload: Any) -> tuple[int, str] | None:
        if not isinstance(payload, dict):
            return 422, "the request body must be a JSON object"
        op = path.rsplit("/", 1)[-1]
        if op == "batch":
            inputs = payload.get("inputs")
            if not isinstance(inputs, list) or not inputs:
                return 422, "'inputs' must be a non-empty list"
            if len(inputs) > self.s.server_max_batch:
                return 413, f"batch of {len(inputs)} exceeds the limit of {self.s.server_max_batch}"
        else:
            inputs = [payload.get("input")]
        for item in inputs:
            if not isinstance(item, dict):
                return 422, "each input must be an object with a 'question' string"
            q = item.get("question")
            if not isinstance(q, str):
                return 422, "'question' must be a string"
            if not q.strip():
                return 422, "'question' must not be empty"
            if len(q) > self.s.server_max_question_chars:
                return (
                    413,
                    f"question of {len(q)} characters exceeds the limit of {self.s.server_max_question_chars}",
                )
            meta = item.get("metadata")
            if meta is not None and not isinstance(meta, dict):
                return 422, "'metadata' must be an object"
        return None

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        path: str = scope["path"]
        if self.s.server_api_key and path not in ("/health", "/ui"):
            headers = dict(scope.get("headers") or [])
            if headers.get(b"x-api-key", b"").decode("latin-1") != self.s.server_api_key:
                return await self._reply(send, 401, "missing or wrong API key (header X-API-Key)")
        parts = path.strip("/").split("/")
        graph_call = (
            scope["method"] == "POST" and len(parts) == 2 and parts[0] in ROUTES
            and parts[1] in ("invoke", "batch", "stream", "stream_events", "stream_log")
        )  # fmt: skip
        if graph_call:
            body = b""
            more = True
            while more:
                msg = await receive()
                body += msg.get("body", b"")
                more = msg.get("more_body", False)
                if len(body) > MAX_BODY_BYTES:
                    return await self._reply(send, 413, f"request body exceeds {MAX_BODY_BYTES} bytes")
            try:
                payload = json.loads(body or b"null")
            except (json.JSONDecodeError, UnicodeDecodeError) as e:
                return await self._reply(send, 400, f"malformed JSON: {e}")
            problem = self._check_payload(path, payload)
            if problem:
                return await self._reply(send, *problem)
            if self.in_flight >= self.s.server_max_concurrency:
                return await self._reply(
                    send,
                    429,
                    f"too many concurrent requests (limit {self.s.server_max_concurrency}); retry later",
                )
            sent = False

            async def replay() -> dict[str, Any]:
                nonlocal sent
                if not sent:
                    sent = True
                    return {"type": "http.request", "body": body, "more_body": False}
                return await receive()

            receive_fn = replay
        else:
            receive_fn = receive
        started = False

        async def tracking_send(message: dict[str, Any]) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        self.in_flight += graph_call
        try:
            await self.app(scope, receive_fn, tracking_send)
        except Exception:  # noqa: BLE001 - every unhandled error becomes a 500 with an id
            error_id = uuid.uuid4().hex[:12]
            log.exception("unhandled error %s on %s %s", error_id, scope["method"], path)
            if not started:
                await self._reply(send, 500, "internal error", error_id=error_id)
        finally:
            self.in_flight -= graph_call


def create_app(
    settings: Settings | None = None,
    *,
    policy: Any = None,
    searcher: Any = None,
    stores: list[str] | None = None,
    graph_config: GraphConfig | dict[str, Any] | None = None,
) -> Any:
    """The FastAPI app with LangServe routes, wrapped in :class:`RequestGuard`.

    Everything comes from ``settings`` (policy, stores or retriever URL, graph config),
    built by :mod:`parallelsearch.graphs.factory`. ``policy`` (an object or a spec),
    ``searcher`` (an object), ``stores`` (names) and ``graph_config`` (values over the
    settings' ``graph``) override it, for tests and notebooks. Each request may change
    the per-request knobs through ``config={"configurable": {...}}``.
    """
    from langserve import add_routes

    from parallelsearch.agents.searchers import describe_searcher
    from parallelsearch.graphs.builders import SEARCHING_KINDS
    from parallelsearch.graphs.factory import make_answer_policy, make_graph, make_policy, make_searcher
    from parallelsearch.page import add_page
    from parallelsearch.threads import (
        ThreadRouted,
        add_thread_routes,
        thread_config_modifier,
        threads_lifespan,
    )

    s = settings or get_settings()
    if isinstance(policy, str):
        s = s.model_copy(update={"policy": policy})
    if stores:
        s = s.model_copy(update={"stores": list(stores), "retriever_url": None})
    cfg = s.graph
    if graph_config:
        given = graph_config if isinstance(graph_config, GraphConfig) else GraphConfig(**graph_config)
        cfg = cfg.updated(**given.model_dump(exclude_unset=True))
    built = policy is None or isinstance(policy, str)
    pol = make_policy(s.policy_config()) if built else policy
    answer_pol = make_answer_policy(s.policy_config()) if built else None
    search = searcher if searcher is not None else make_searcher(s.retrieval())

    def build(route: str, checkpointer: Any = None) -> Any:
        kind = ROUTES[route]
        return make_graph(
            kind,
            policy=pol,
            searcher=search,
            graph=cfg,
            answer_policy=answer_pol if kind in SEARCHING_KINDS else None,
            checkpointer=checkpointer,
        )

    keeps_threads = s.server_checkpointer != "none"
    routers = {route: ThreadRouted(build(route)) for route in ROUTES} if keeps_threads else {}
    app = FastAPI(
        title="ParallelSearch",
        version=__version__,
        description="ParallelSearch (parallel sub-query search) and its baselines as LangServe routes.",
        lifespan=threads_lifespan(s.server_checkpointer, s.checkpoint_target(), routers, build)
        if keeps_threads
        else None,
    )
    serializer = _graph_serializer()
    for route in ROUTES:
        # the compiled graph (behind the thread router when the server keeps threads): its
        # input/output schemas are GraphInput/GraphOutput, and its context schema (GraphContext)
        # becomes the route's config schema (per-request knobs; thread_id passes through)
        runnable = routers[route] if keeps_threads else build(route)
        add_routes(
            app,
            runnable,
            path=f"/{route}",
            serializer=serializer,
            per_req_config_modifier=thread_config_modifier(keeps_threads),
        )
    add_thread_routes(app, routers)
    add_page(app)

    @app.exception_handler(Exception)
    async def unhandled(request: Any, exc: Exception) -> Any:
        from fastapi.responses import JSONResponse

        error_id = uuid.uuid4().hex[:12]
        log.error("unhandled error %s on %s %s", error_id, request.method, request.url.path, exc_info=exc)
        return JSONResponse({"detail": "internal error", "error_id": error_id}, status_code=500)

    @app.get("/health")
    async def health() -> dict[str, Any]:
        return {
            "status": "ok",
            "policy": getattr(pol, "name", type(pol).__name__),
            "routes": [f"/{r}" for r in ROUTES],
            "graph": cfg.model_dump(),
            "per_request": list(PER_REQUEST_KEYS),
            "threads": s.server_checkpointer,
            "api_key_required": bool(s.server_api_key),
        }

    @app.get("/stores")
    async def stores_route() -> dict[str, Any]:
        return {"stores": await asyncio.to_thread(describe_searcher, search)}

    return RequestGuard(app, s)
