"""The loopback option: the sessions behind a real HTTP server on 127.0.0.1, for an agent that
speaks HTTP itself (another process, or a client that must use a socket).

A session is reached at ``/sessions/<id>/v1/chat/completions``, or at ``/v1/chat/completions``
with the header ``x-gateway-session: <id>`` (what :class:`SessionHeaderTransport` adds for the
current episode). The server runs its own event loop in a thread; each request is handed to the
loop its session was opened on, where the engine lives.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import httpx

from parallelsearch.rl.gateway.errors import GatewayError
from parallelsearch.rl.gateway.session import GatewaySession
from parallelsearch.rl.gateway.transport import answer, current_session
from parallelsearch.stores.http.loopback import LoopbackServer

SESSION_HEADER = "x-gateway-session"


class SessionRegistry:
    """Open sessions by id, each with the event loop it runs on."""

    def __init__(self) -> None:
        self._open: dict[str, tuple[GatewaySession, asyncio.AbstractEventLoop]] = {}
        self._lock = threading.Lock()

    def open(self, session: GatewaySession) -> None:
        with self._lock:
            self._open[session.id] = (session, asyncio.get_running_loop())

    def close(self, session: GatewaySession) -> None:
        with self._lock:
            self._open.pop(session.id, None)

    def get(self, sid: str | None) -> tuple[GatewaySession, asyncio.AbstractEventLoop] | None:
        with self._lock:
            return self._open.get(sid or "")


def gateway_app(registry: SessionRegistry) -> Any:
    """The ASGI app serving the registry's sessions."""
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    async def endpoint(request: Request) -> JSONResponse:
        sid = request.path_params.get("sid") or request.headers.get(SESSION_HEADER)
        found = registry.get(sid)
        raw = await request.body()
        if found is None:
            known = GatewayError(
                404, f"no open gateway session {sid!r} (the episode ended, or the id is wrong)"
            )
            return JSONResponse(known.body(), status_code=404)
        session, loop = found
        work = asyncio.run_coroutine_threadsafe(answer(session, request.method, request.url.path, raw), loop)
        status, body = await asyncio.wrap_future(work)
        return JSONResponse(body, status_code=status)

    return Starlette(
        routes=[
            Route("/sessions/{sid}/v1/chat/completions", endpoint, methods=["POST"]),
            Route("/v1/chat/completions", endpoint, methods=["POST"]),
        ]
    )


class LoopbackGateway(LoopbackServer):
    """``gateway_app`` served on a free port of 127.0.0.1 in a daemon thread."""

    def __init__(self, registry: SessionRegistry, start_timeout_s: float = 30.0):
        super().__init__(gateway_app(registry), start_timeout_s=start_timeout_s, thread_name="gateway-http")


class SessionHeaderTransport(httpx.AsyncHTTPTransport):
    """httpx's own transport, naming the current episode's session in a header."""

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        session = current_session.get()
        if session is not None:
            request.headers[SESSION_HEADER] = session.id
        return await super().handle_async_request(request)


class SyncSessionHeaderTransport(httpx.HTTPTransport):
    """The sync twin (``invoke`` from a sync node or hook), naming the same session."""

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        session = current_session.get()
        if session is not None:
            request.headers[SESSION_HEADER] = session.id
        return super().handle_request(request)


def loopback_chat_model(url: str, model: str = "policy", **kwargs: Any) -> Any:
    """``ChatOpenAI`` on the loopback server (a real socket), routed to the current session."""
    from langchain_openai import ChatOpenAI

    return ChatOpenAI(
        model=model,
        base_url=f"{url}/v1",
        api_key="gateway",  # type: ignore[arg-type]
        http_async_client=httpx.AsyncClient(transport=SessionHeaderTransport(), timeout=None),
        http_client=httpx.Client(transport=SyncSessionHeaderTransport(), timeout=None),
        **kwargs,
    )
