"""How an agent reaches its episode's session: in-process (an httpx transport with no socket,
so an OpenAI client such as LangChain's ``ChatOpenAI`` talks to the session directly) or over
loopback HTTP (:mod:`parallelsearch.rl.gateway.http`, for an agent in another process).

In-process, the episode's session is the one set in :data:`current_session` by the task that
runs the episode: LangGraph's node tasks copy the context, so concurrent episodes each reach
their own session through one shared model. The model's sync path (``invoke``, from a sync node
or hook in a worker thread) hands its request to the episode's loop and waits with the call's
deadline; called on that loop's own thread it would block the loop it waits for, so it raises.
"""

from __future__ import annotations

import asyncio
import json
from contextvars import ContextVar
from typing import Any

import httpx

from parallelsearch.rl.gateway.errors import GatewayError
from parallelsearch.rl.gateway.session import GatewaySession

#: the session of the episode this task runs
current_session: ContextVar[GatewaySession | None] = ContextVar("gateway_session", default=None)
#: the base URL an in-process client is given (never resolved: no request leaves the process)
INPROCESS_URL = "http://gateway.inprocess/v1"


async def answer(
    session: GatewaySession | None, method: str, path: str, raw: bytes
) -> tuple[int, dict[str, Any]]:
    """(status, JSON body) of one HTTP request to a session's OpenAI endpoint."""
    if not path.rstrip("/").endswith("/chat/completions"):
        return 404, GatewayError(
            404, f"no such endpoint {path!r}: the gateway serves /v1/chat/completions"
        ).body()
    if method != "POST":
        return 405, GatewayError(405, f"{method} {path}: use POST").body()
    if session is None:
        return 409, GatewayError(
            409, "no gateway session for this request: it came from outside an episode"
        ).body()
    try:
        body = json.loads(raw or b"null")
    except ValueError as e:
        return 400, GatewayError(400, f"the request body is not JSON: {e}").body()
    try:
        return 200, await asyncio.wait_for(session.complete(body), session.limits.call_timeout_s)
    except GatewayError as e:
        return e.status, e.body()
    except TimeoutError:
        why = f"model call {session.counters.requests} took over {session.limits.call_timeout_s:g} s"
        session.mark_stuck(f"{why} (agent.gateway_timeout_s)")
        return 504, GatewayError(504, f"{why}: the episode stops and its sample fails closed").body()


class InProcessTransport(httpx.AsyncBaseTransport):
    """An httpx transport that hands each request to the current episode's session."""

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        raw = await request.aread()
        status, body = await answer(current_session.get(), request.method, request.url.path, raw)
        return httpx.Response(status, json=body, request=request)


class SyncInProcessTransport(httpx.BaseTransport):
    """The sync twin: the request is answered on the episode's loop (its session lives there),
    within the call's deadline; on that loop's own thread it raises at once instead of hanging."""

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        session = current_session.get()
        raw = request.read()
        loop = session.loop if session is not None else None
        if session is None or loop is None:
            status, body = asyncio.run(answer(session, request.method, request.url.path, raw))
            return httpx.Response(status, json=body, request=request)
        try:
            on_loop = asyncio.get_running_loop() is loop
        except RuntimeError:
            on_loop = False
        if on_loop:
            raise RuntimeError(
                "a sync model call (invoke) was made on the episode's event loop, which it would block "
                "forever: call ainvoke, or give the middleware its async hook (awrap_model_call)"
            )
        work = asyncio.run_coroutine_threadsafe(answer(session, request.method, request.url.path, raw), loop)
        try:
            status, body = work.result(timeout=session.limits.call_timeout_s + 5.0)
        except TimeoutError:
            work.cancel()
            session.mark_stuck(
                f"a sync model call waited over {session.limits.call_timeout_s:g} s for the loop"
            )
            status, body = 504, GatewayError(504, session.stuck_reason or "stuck").body()
        return httpx.Response(status, json=body, request=request)


def gateway_chat_model(model: str = "policy", **kwargs: Any) -> Any:
    """LangChain's ``ChatOpenAI`` on the in-process transport: the chat model a user's factory
    gets in training, as it gets ``ChatOpenAI(base_url=<vllm>)`` when serving."""
    from langchain_openai import ChatOpenAI

    return ChatOpenAI(
        model=model,
        base_url=INPROCESS_URL,
        api_key="gateway",  # type: ignore[arg-type]
        http_async_client=httpx.AsyncClient(transport=InProcessTransport(), timeout=None),
        http_client=httpx.Client(transport=SyncInProcessTransport(), timeout=None),
        **kwargs,
    )
