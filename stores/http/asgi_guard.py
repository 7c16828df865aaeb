"""What every JSON HTTP endpoint needs before and after its own code runs (docs/architecture.md,
"Guarding the servers"), shared by the ``/retrieve`` server and the LangServe app's guard.

Body limits are checked before parsing (size first, then nesting depth by a linear scan, so a
50,000-level ``[[[[...`` never reaches a recursive parser); lone surrogates and invalid UTF-8
become U+FFFD, since nothing downstream can encode them; an unhandled error is one log line and
one JSON 500 with an id, not re-raised, so uvicorn keeps the keep-alive connection.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from itertools import accumulate
from typing import Any

from parallelsearch.stores.redact import redact_urls
from parallelsearch.stores.text import scrub_text

Scope = dict[str, Any]
Message = dict[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

DEFAULT_MAX_BODY_BYTES = 1_000_000
DEFAULT_MAX_JSON_DEPTH = 64
#: a body over the limit is still read (and dropped) up to this many bytes before the 413,
#: so the client, still sending, reads the answer instead of a connection reset
DRAIN_LIMIT_BYTES = 16_000_000
BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})
#: the scope key under which the parsed (and repaired) JSON body travels to inner layers
SCOPE_JSON = "parallelsearch.json"

#: a JSON escape that decodes to a surrogate code point (raw ones cannot survive UTF-8 decoding)
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")
#: a JSON string (escapes included); used to blank strings out before counting brackets
_JSON_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_NOT_BRACKET = re.compile(rb"[^\[\]{}]+")
_BRACKET_STEP = bytes.maketrans(b"[{]}", b"\x01\x01\xff\xff")  # +1 / -1 as signed bytes
#: bodies at least this large are checked and parsed in a worker thread, off the event loop
OFF_LOOP_BYTES = 64_000


class BodyRejected(Exception):
    """The body breaks a limit; ``status`` and ``detail`` are the answer."""

    def __init__(self, status: int, detail: str):
        super().__init__(detail)
        self.status, self.detail = status, detail


@dataclass
class JsonBody:
    """A request body as the app will read it: ``raw`` (re-encoded when text was repaired), the parsed
    ``value`` or the ``error`` the app answers itself, and how many strings were ``repaired``."""

    raw: bytes
    value: Any = None
    error: str | None = None
    repaired: int = 0


def clean_json(value: Any) -> tuple[Any, int]:
    """``value`` with :func:`scrub_text` applied to every string (keys too); and how many changed."""
    if isinstance(value, str):
        cleaned, replaced = scrub_text(value)
        return cleaned, int(replaced > 0)
    if isinstance(value, list):
        items = [clean_json(item) for item in value]
        return [c for c, _ in items], sum(n for _, n in items)
    if isinstance(value, dict):
        pairs = [(clean_json(k), clean_json(v)) for k, v in value.items()]
        return {k: v for (k, _), (v, _) in pairs}, sum(nk + nv for (_, nk), (_, nv) in pairs)
    return value, 0


def json_depth(body: bytes) -> int:
    """How deeply ``body``'s arrays and objects nest, in linear time: strings blanked out, then the
    running sum of +1/-1 per bracket taken in C (``accumulate`` over signed bytes)."""
    brackets = _NOT_BRACKET.sub(b"", _JSON_STRING.sub(b'""', body))
    if not brackets:
        return 0
    return max(accumulate(memoryview(brackets.translate(_BRACKET_STEP)).cast("b")))


def parse_json(body: bytes, *, max_depth: int = DEFAULT_MAX_JSON_DEPTH) -> JsonBody:
    """Parse ``body``, repairing invalid Unicode; :class:`BodyRejected` (400) when it nests deeper
    than ``max_depth``. A body that is not JSON comes back with ``error`` set."""
    # nesting is no deeper than the opening brackets: nearly every real body is not scanned
    if body.count(b"[") + body.count(b"{") > max_depth and (depth := json_depth(body)) > max_depth:
        raise BodyRejected(400, f"JSON nested {depth} levels deep; the limit is {max_depth}")
    try:
        text, bad_utf8 = body.decode("utf-8"), False
    except UnicodeDecodeError:
        text, bad_utf8 = body.decode("utf-8", errors="replace"), True
    try:
        value = json.loads(text, parse_constant=_not_json)
    except (ValueError, RecursionError) as e:  # JSONDecodeError, a 5,000-digit number, NaN, ...
        return JsonBody(raw=body, error=f"malformed JSON: {e}")
    repaired = 0
    if _SURROGATE_ESCAPE.search(body):
        value, repaired = clean_json(value)
    if repaired:
        raw = json.dumps(value, ensure_ascii=False).encode()
    elif bad_utf8:
        raw, repaired = text.encode(), 1
    else:
        raw = body
    return JsonBody(raw=raw, value=value, repaired=repaired)


def _not_json(constant: str) -> Any:
    """Python's parser reads ``NaN`` and ``Infinity``; JSON has neither, and nothing after the
    guard could write them back out (a validation error echoing one was a 500)."""
    raise ValueError(f"{constant} is not a JSON value")


async def parse_json_body(body: bytes, *, max_depth: int = DEFAULT_MAX_JSON_DEPTH) -> JsonBody:
    """:func:`parse_json` for a request: an empty body is left as is, a large one parsed off the loop."""
    if not body:
        return JsonBody(raw=body)
    if len(body) >= OFF_LOOP_BYTES:
        return await asyncio.to_thread(parse_json, body, max_depth=max_depth)
    return parse_json(body, max_depth=max_depth)


async def read_body(scope: Scope, receive: Receive, *, max_bytes: int = DEFAULT_MAX_BODY_BYTES) -> bytes:
    """The whole request body, or :class:`BodyRejected` (413) once it is larger than ``max_bytes``."""
    declared = _content_length(scope)
    too_big = BodyRejected(413, f"request body exceeds the limit of {max_bytes} bytes")
    if declared is not None and declared > max_bytes and declared > DRAIN_LIMIT_BYTES:
        raise too_big
    chunks: list[bytes] = []
    size = 0
    more = True
    while more:
        msg = await receive()
        if msg["type"] == "http.disconnect":
            raise BodyRejected(400, "the client disconnected while sending the body")
        chunk = msg.get("body", b"")
        size += len(chunk)
        more = msg.get("more_body", False)
        if size <= max_bytes:
            chunks.append(chunk)
        elif size > DRAIN_LIMIT_BYTES:
            raise too_big
    if size > max_bytes:
        raise too_big
    return b"".join(chunks)


def _content_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers") or ():
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


def replaying(scope: Scope, body: bytes, receive: Receive) -> tuple[Scope, Receive]:
    """A scope (``Content-Length`` set to ``body``'s length) and a receive that gives ``body`` first."""
    headers = [(k, v) for k, v in scope.get("headers") or () if k != b"content-length"]
    headers.append((b"content-length", str(len(body)).encode()))
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return {**scope, "headers": headers}, replay


async def json_reply(
    send: Send, status: int, detail: str, *, headers: dict[str, str] | None = None, **extra: Any
) -> None:
    """Answer ``{"detail": detail, **extra}`` with ``status`` (and any extra headers)."""
    body = json.dumps({"detail": scrub_text(detail)[0], **extra}).encode()
    head = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    head += [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in (headers or {}).items()]
    await send({"type": "http.response.start", "status": status, "headers": head})
    await send({"type": "http.response.body", "body": body})


def _causes(exc: BaseException) -> list[BaseException]:
    seen: list[BaseException] = []
    e: BaseException | None = exc
    while e is not None and len(seen) < 8 and e not in seen:
        seen.append(e)
        e = e.__cause__ or e.__context__
    return seen


def request_url(exc: BaseException) -> str | None:
    """The URL an HTTP client's error was about (OpenAI's and httpx's errors keep the request)."""
    try:
        request = getattr(exc, "request", None)
    except RuntimeError:  # httpx raises when an error has no request
        return None
    url = getattr(request, "url", None)
    return str(url) if url is not None else None


def upstream_failure(exc: BaseException) -> tuple[int, str] | None:
    """``(502 | 503, message)`` when ``exc`` (or its cause) is a server this one depends on failing: a
    model server or retriever that answered an error (502) or could not be reached (503). The
    project's errors carry their status (``http_status``); a provider SDK's are told by name."""
    for e in _causes(exc):
        status = getattr(e, "http_status", None)
        kind = type(e)
        root = kind.__module__.partition(".")[0]
        if status is None and root in ("openai", "anthropic", "httpx", "httpcore"):
            unreachable = any(w in kind.__name__ for w in ("Connect", "Timeout", "Transport", "Network"))
            status = 503 if unreachable else 502
        if status in (502, 503):
            what = "is unreachable" if status == 503 else "failed"
            text = f"{kind.__name__}: {e}" if root != "parallelsearch" else str(e)
            url = request_url(e)
            text = redact_urls(f"{text} ({url})" if url and url not in text else text)
            return status, f"a server this one depends on {what}: {text}"[:600]
    return None


async def call_with_error_id(
    app: ASGIApp, scope: Scope, receive: Receive, send: Send, log: logging.Logger
) -> None:
    """Run ``app``; an exception becomes one log line and, when nothing was sent yet, one JSON 500
    (a stream failing midway can only be cut off)."""
    started = False

    async def tracking_send(message: Message) -> None:
        nonlocal started
        if message["type"] == "http.response.start":
            started = True
        await send(message)

    try:
        await app(scope, receive, tracking_send)
    except Exception as exc:  # noqa: BLE001 - every unhandled error becomes a 5xx with an id
        error_id = getattr(exc, "error_id", None) or uuid.uuid4().hex[:12]  # one a stream already sent
        upstream = upstream_failure(exc)
        log.error(
            "%s %s on %s %s%s",
            "upstream failure" if upstream else "unhandled error",
            error_id,
            scope.get("method"),
            scope.get("path"),
            " (after the response started)" if started else "",
            exc_info=exc,
        )
        if not started:
            status, detail = upstream or (500, "internal error")
            await json_reply(send, status, detail, error_id=error_id)


#: the Host names a server bound to loopback answers to (any port): a DNS-rebinding page's name is not one
LOOPBACK_HOSTS = frozenset({"localhost", "127.0.0.1", "::1"})


def host_name(value: str) -> str:
    """The name part of a ``Host`` header, lower-cased, without port or IPv6 brackets."""
    value = value.strip().lower()
    if value.startswith("["):
        return value[1:].partition("]")[0]
    return value.rpartition(":")[0] if value.count(":") == 1 else value


def header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers") or ():
        if key == name:
            return value.decode("latin-1")
    return None


def browser_problem(scope: Scope, allowed_hosts: frozenset[str] | None) -> tuple[int, str] | None:
    """Why a request may come from a web page it must not serve: a ``Host`` outside
    ``allowed_hosts`` (DNS rebinding: the page's own name pointed at this address), or a body that
    is not ``application/json`` (a form or ``text/plain`` POST needs no CORS preflight, so any
    page could send one). ``(status, detail)`` or None."""
    host = header(scope, b"host")
    if allowed_hosts is not None and host is not None and host_name(host) not in allowed_hosts:
        return 400, (
            f"Host {host!r} is not a name this server answers to ({', '.join(sorted(allowed_hosts))}); "
            "an operator adds names with server_allowed_hosts (--allowed-host)"
        )
    if scope["method"] in BODY_METHODS:
        media = (header(scope, b"content-type") or "").partition(";")[0].strip().lower()
        if media != "application/json" and not media.endswith("+json"):
            shown = media or "none"
            return 415, f"the body must be sent as Content-Type: application/json (got {shown})"
    return None


class BrowserGuard:
    """ASGI middleware: :func:`browser_problem` for every HTTP request (outermost)."""

    def __init__(self, app: ASGIApp, allowed_hosts: frozenset[str] | None = None):
        self.app = app
        self.allowed_hosts = None if allowed_hosts is None else frozenset(map(host_name, allowed_hosts))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            problem = browser_problem(scope, self.allowed_hosts)
            if problem:
                return await json_reply(send, *problem)
        await self.app(scope, receive, send)


class JsonBodyGuard:
    """ASGI middleware: body limits, repaired text and error ids for every request (see module doc).
    A body that is not JSON is a 400 naming where it broke."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
        max_json_depth: int = DEFAULT_MAX_JSON_DEPTH,
        logger: str = "parallelsearch.http",
    ):
        self.app = app
        self.max_body_bytes = max_body_bytes
        self.max_json_depth = max_json_depth
        self.log = logging.getLogger(logger)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        if scope["method"] in BODY_METHODS:
            try:
                body = await read_body(scope, receive, max_bytes=self.max_body_bytes)
                parsed = await parse_json_body(body, max_depth=self.max_json_depth)
            except BodyRejected as e:
                return await json_reply(send, e.status, e.detail)
            if parsed.error:
                return await json_reply(send, 400, parsed.error)
            scope, receive = replaying(scope, parsed.raw, receive)
            scope[SCOPE_JSON] = parsed
        await call_with_error_id(self.app, scope, receive, send, self.log)
