"""Errors of the OpenAI-compatible endpoint in OpenAI's shape, ``{"error": {"message", "type",
"param", "code"}}``, which OpenAI clients and chat frontends read: a failing model server is a
502/503/504 naming it, and every other error answer under ``/v1/`` (the guard's 400/401/413/
429/500, FastAPI's 404) gets the same object beside its ``detail``."""

from __future__ import annotations

import json
from typing import Any

from parallelsearch.agents.policies.scripted import OracleNeedsGoldError
from parallelsearch.stores.errors import UnavailableError
from parallelsearch.stores.http.asgi_guard import request_url

#: the paths whose error answers take OpenAI's shape
PREFIX = "/v1/"


def error_type(status: int) -> str:
    if status == 401:
        return "authentication_error"
    if status == 429:
        return "rate_limit_error"
    return "invalid_request_error" if status < 500 else "server_error"


def error_object(status: int, message: str) -> dict[str, Any]:
    return {"message": message, "type": error_type(status), "param": None, "code": None}


def error_body(status: int, message: str, **extra: Any) -> dict[str, Any]:
    """OpenAI's error object, and the ``detail`` every route of the app answers with."""
    return {"error": error_object(status, message), "detail": message, **extra}


def _where(exc: Exception) -> str:
    url = request_url(exc)
    return f" {url}" if url else ""


def _http_problem(exc: Exception) -> tuple[int, str] | None:
    """A model server's failure as an HTTP client reports it (the openai package, httpx): both
    libraries' timeouts, unreachable servers and error statuses, each kind one answer."""
    import httpx

    try:
        import openai
    except ImportError:  # a deployment without the openai package: its errors cannot occur
        openai = None  # type: ignore[assignment]  # the optional openai package
    timeouts: tuple[type[Exception], ...] = (httpx.TimeoutException,)
    unreachable: tuple[type[Exception], ...] = (httpx.TransportError,)
    if openai is not None:  # its timeout is a connection error: timeouts are looked at first
        timeouts, unreachable = (*timeouts, openai.APITimeoutError), (*unreachable, openai.APIConnectionError)
    if isinstance(exc, timeouts):
        return 504, f"the model server{_where(exc)} did not answer in time ({exc})"
    if isinstance(exc, unreachable):
        return 503, f"the model server{_where(exc)} cannot be reached ({exc})"
    if openai is not None and isinstance(exc, openai.APIStatusError):
        return 502, f"the model server{_where(exc)} answered {exc.status_code}: {exc.message}"
    if isinstance(exc, httpx.HTTPStatusError):
        return 502, f"the model server{_where(exc)} answered {exc.response.status_code}"
    return None


def upstream_problem(exc: Exception) -> tuple[int, str] | None:
    """(status, message) for an error of a run that is not this server's fault: the model
    server failing (502 answered an error, 503 unreachable, 504 timed out), a policy's missing
    input (400); None for anything else (a bug: the guard's 500 with an error id)."""
    if isinstance(exc, OracleNeedsGoldError):
        return 400, str(exc)
    if isinstance(exc, UnavailableError):
        return 503, str(exc)
    return _http_problem(exc)


def openai_error_json(status: int, raw: bytes) -> bytes:
    """An error answer's JSON body with OpenAI's error object added (left as it is when it has one)."""
    try:
        body = json.loads(raw)
    except ValueError:
        body = {"detail": raw.decode("utf-8", "replace")}
    if not isinstance(body, dict) or "error" in body:
        return raw
    detail = body.get("detail")
    message = detail if isinstance(detail, str) else json.dumps(detail)
    return json.dumps({"error": error_object(status, message), **body}).encode()


class OpenAIErrors:
    """ASGI middleware (outside the guard): error answers under ``/v1/`` in OpenAI's shape.
    Only a JSON answer of status 400 or more is held and rewritten; streams pass untouched."""

    def __init__(self, app: Any):
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or not scope["path"].startswith(PREFIX):
            return await self.app(scope, receive, send)
        held: dict[str, Any] | None = None
        chunks: list[bytes] = []

        async def rewriting(message: dict[str, Any]) -> None:
            nonlocal held
            if message["type"] == "http.response.start" and message["status"] >= 400 and _is_json(message):
                held = message
                return
            if held is None or message["type"] != "http.response.body":
                return await send(message)
            chunks.append(message.get("body", b""))
            if message.get("more_body"):
                return
            body = openai_error_json(held["status"], b"".join(chunks))
            headers = [(k, v) for k, v in held["headers"] if k != b"content-length"]
            headers.append((b"content-length", str(len(body)).encode()))
            await send({**held, "headers": headers})
            await send({"type": "http.response.body", "body": body})

        await self.app(scope, receive, rewriting)


def _is_json(start: dict[str, Any]) -> bool:
    return any(
        k == b"content-type" and v.startswith(b"application/json") for k, v in start.get("headers", ())
    )
