"""The LangServe deployment: the parallel graph and its baselines behind one FastAPI app.

Routes: one LangServe route per graph (``ROUTES``), the OpenAI-compatible ``/v1/chat/completions``
and ``/v1/models`` (:mod:`parallelsearch.serving.openai_api`), ``GET /health``, ``GET /stores``, the page
``GET /ui`` (:mod:`parallelsearch.serving.page`) and, when the server keeps threads, the thread routes
(:mod:`parallelsearch.serving.thread_routes`); :class:`~parallelsearch.serving.guard.RequestGuard` guards them all.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

from fastapi import FastAPI

from parallelsearch import __version__
from parallelsearch.agents.policies.scripted import OraclePolicy
from parallelsearch.graphs.config import PER_REQUEST_KEYS, knob_bounds
from parallelsearch.serving.admission import AdmissionQueue
from parallelsearch.serving.guard import RequestGuard
from parallelsearch.serving.request_checks import RequestCaps
from parallelsearch.serving.thread_routes import ThreadLocks
from parallelsearch.settings import Settings, get_settings
from parallelsearch.stores.http.api_key import KeyFailures
from parallelsearch.stores.redact import redact_urls

log = logging.getLogger("parallelsearch.serving")

ROUTES = {"parallelsearch": "parallel", "sequential": "sequential", "rag": "rag", "dag": "dag"}
__all__ = ["ROUTES", "RequestGuard", "create_app"]


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


def create_app(settings: Settings | None = None, *, policy: Any = None, searcher: Any = None) -> Any:
    """The FastAPI app with LangServe routes behind :class:`RequestGuard`, built from ``settings``
    through :meth:`Settings.graph_parts` (the CLI's path too).

    ``policy`` and ``searcher``: objects already built (tests, notebooks) used instead of the
    settings' spec and stores; a ``policy`` string is a spec that replaces the settings'.
    """
    from parallelsearch.serving.page import add_page
    from parallelsearch.serving.thread_routes import ThreadRouted, add_thread_routes, threads_lifespan

    s = settings or get_settings()
    if isinstance(policy, str):  # a spec: built by the factory like the settings' own
        s, policy = s.model_copy(update={"policy": policy}), None
    s = s.served()
    parts = s.graph_parts(ROUTES.values(), policy=policy, searcher=searcher)

    def build(route: str, checkpointer: Any = None) -> Any:
        return parts.graph(ROUTES[route], checkpointer)

    keeps_threads = s.server_checkpointer != "none"
    routers = {route: ThreadRouted(build(route)) for route in ROUTES} if keeps_threads else {}
    thread_locks = ThreadLocks(s.server_multitask_strategy, s.server_queue_timeout_s)
    app = FastAPI(
        title="ParallelSearch",
        version=__version__,
        description="ParallelSearch (parallel sub-query search) and its baselines as LangServe routes.",
        lifespan=threads_lifespan(s.server_checkpointer, s.checkpoint_target(), routers, build, thread_locks)
        if keeps_threads
        else None,
    )
    served = {route: routers[route] if keeps_threads else build(route) for route in ROUTES}
    _add_graph_routes(app, served, keeps_threads)
    add_thread_routes(app, routers)
    add_page(app)
    needs_gold = isinstance(parts.policy, OraclePolicy)
    chat_check = _add_openai_routes(app, served, s, keeps_threads=keeps_threads, needs_gold=needs_gold)
    _add_guards(app, s, thread_locks, needs_gold=needs_gold, chat_check=chat_check)
    _add_status_routes(app, s, parts)
    return app


def _add_graph_routes(app: FastAPI, served: dict[str, Any], keeps_threads: bool) -> None:
    """One LangServe route per graph, so each graph is invoked, batched and streamed the LangServe way."""
    from langserve import add_routes

    from parallelsearch.serving.thread_routes import thread_config_modifier

    serializer = _graph_serializer()
    for route, runnable in served.items():
        # the graph's context schema becomes the route's config schema (the per-request knobs)
        add_routes(
            app,
            runnable,
            path=f"/{route}",
            serializer=serializer,
            per_req_config_modifier=thread_config_modifier(keeps_threads),
            # its page rendered blank (it cannot draw the input schema); /ui is the page
            disabled_endpoints=["playground"],
        )


def _add_openai_routes(
    app: FastAPI, served: dict[str, Any], s: Settings, *, keeps_threads: bool, needs_gold: bool
) -> Any:
    """The OpenAI-compatible routes over the served graphs, so OpenAI clients can ask them; returns
    the chat request's check, which the guard runs before a request is admitted."""
    from parallelsearch.serving.openai_api import ChatCompletions, RequestRules

    chat = ChatCompletions(
        served,
        RequestRules(
            tuple(ROUTES), s.server_max_question_chars, keeps_threads, needs_gold, RequestCaps.of(s)
        ),
    )
    chat.add_routes(app)
    return chat.check


def _add_guards(
    app: FastAPI, s: Settings, thread_locks: ThreadLocks, *, needs_gold: bool, chat_check: Any
) -> None:
    """The request guard and, outside it, the OpenAI error shape, so every route is admitted,
    checked and answered on failure in one place."""
    from parallelsearch.serving.openai_api import CHAT_PATH
    from parallelsearch.serving.openai_errors import OpenAIErrors

    # inside Starlette's ServerErrorMiddleware, so an unhandled error reaches the guard first
    # and is answered and logged once (no app-level exception handler: it would log again)
    admission = AdmissionQueue(s.server_max_concurrency, s.server_queue_size, s.server_queue_timeout_s)
    app.state.admission = admission
    app.state.key_failures = KeyFailures(s.server_key_failure_limit, s.server_key_failure_window_s)
    app.state.thread_locks = thread_locks
    app.add_middleware(
        RequestGuard,
        settings=s,
        admission=admission,
        routes=set(ROUTES),
        needs_gold=needs_gold,
        key_failures=app.state.key_failures,
        thread_locks=thread_locks,
        calls={CHAT_PATH: chat_check},
    )
    app.add_middleware(OpenAIErrors)  # outside the guard: its refusals under /v1/ in OpenAI's shape


def open_graph_config(config: Any) -> dict[str, Any]:
    """The graph knobs as the open ``/health`` shows them: the operator's instructions
    (``system_prompt``, ``prompt_template``) are said to be set, never shown."""
    shown = config.model_dump()
    for private in ("system_prompt", "prompt_template"):
        if shown.get(private) is not None:
            shown[private] = "(set)"
    return shown


def route_table(app: FastAPI) -> dict[str, list[str]]:
    """The routes the app's router holds, read at the request: ``routes``, the graph routes (each
    LangServe ``/NAME/invoke``, as ``/NAME``), and ``endpoints``, every ``METHOD /path`` it answers,
    so a route added anywhere is listed without a list kept here."""
    endpoints = [
        f"{method} {route.path}"
        for route in app.router.routes
        for method in sorted(getattr(route, "methods", None) or ())
        if method != "HEAD"
    ]
    graphs = [
        route.path.removesuffix("/invoke")
        for route in app.router.routes
        if route.path.endswith("/invoke") and "{" not in route.path
    ]
    return {"routes": list(dict.fromkeys(graphs)), "endpoints": endpoints}


def _add_status_routes(app: FastAPI, s: Settings, parts: Any) -> None:
    """``GET /health`` and ``GET /stores``, so an operator sees what the server runs and how loaded it is."""
    from parallelsearch.agents.searchers import describe_searcher

    admission: AdmissionQueue = app.state.admission
    thread_locks: ThreadLocks = app.state.thread_locks

    @app.get("/health")
    async def health() -> dict[str, Any]:
        return {
            "status": "ok",
            "policy": redact_urls(str(getattr(parts.policy, "name", type(parts.policy).__name__))),
            **route_table(app),
            "graph": open_graph_config(parts.config),
            "per_request": list(PER_REQUEST_KEYS),
            "knobs": RequestCaps.of(s).bounds(knob_bounds()),
            "threads": s.server_checkpointer,
            "api_key_required": bool(s.server_api_key),
            "admission": admission.stats(),
            "threads_waited": thread_locks.waited,
            "threads_rejected": thread_locks.rejected,
        }

    @app.get("/stores")
    async def stores_route() -> dict[str, Any]:
        # names, counts and models; a location is shown without its password
        rows = await asyncio.to_thread(describe_searcher, parts.searcher)
        return {"stores": json.loads(redact_urls(json.dumps(rows, default=str)))}
