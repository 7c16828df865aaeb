"""The request guard of the LangServe app: what a public endpoint needs, for every graph route.

Pure ASGI middleware (``app.add_middleware(RequestGuard, ...)``), so streaming passes untouched.
In order: the Host and content type (no web page may drive the server), the API key, body
limits, the graph call's input and ``configurable`` checks, one run per thread, admission, the
response size, and one JSON 5xx with an ``error_id`` for an error (502/503 naming a server this
one depends on) (docs/architecture.md, "Guarding the servers").
"""

from __future__ import annotations

import asyncio
import json
import logging
import uuid
from collections.abc import Callable, Mapping
from typing import Any

from parallelsearch.serving.admission import AdmissionQueue, ClientGone, Refused
from parallelsearch.serving.request_checks import (
    ORACLE_NEEDS_GOLD_SERVED,
    RequestCaps,
    RequestProblem,
    check_message_count,
    checked_configurables,
    typed_messages,
)
from parallelsearch.serving.thread_routes import ThreadBusy, ThreadLocks
from parallelsearch.settings import Settings
from parallelsearch.stores.http.api_key import KeyFailures, key_passes
from parallelsearch.stores.http.asgi_guard import (
    BODY_METHODS,
    OFF_LOOP_BYTES,
    SCOPE_JSON,
    BodyRejected,
    browser_problem,
    call_with_error_id,
    host_name,
    json_reply,
    parse_json_body,
    read_body,
    replaying,
    upstream_failure,
)

log = logging.getLogger("parallelsearch.serving")

#: LangServe's operations that run the graph (each also under ``/c/{config_hash}/``)
GRAPH_OPS = frozenset({"invoke", "batch", "stream", "stream_events", "stream_log"})
OPEN_PATHS = frozenset({"/health", "/ui", "/ui/examples"})
#: a graph call outside LangServe (``POST`` to an exact path): its body's check, (status, message) or None
PayloadCheck = Callable[[Any], "tuple[int, str] | None"]


def graph_call(method: str, path: str, routes: frozenset[str] | set[str]) -> str | None:
    """The LangServe operation ``method path`` runs on a served graph, or None: any path under a
    route that ends in an operation (``/{route}/c/{hash}/{op}`` too), so no variant escapes the checks."""
    if method != "POST":
        return None
    parts = [p for p in path.split("/") if p]
    if len(parts) >= 2 and parts[0] in routes and parts[-1] in GRAPH_OPS:
        return parts[-1]
    return None


def _checked_input(item: Any, settings: Settings, needs_gold: bool) -> Any:
    """One graph input, checked; messages come back in the typed form the input schema reads."""
    if not isinstance(item, dict):
        raise RequestProblem(422, "each input must be an object with a 'question' string")
    q = item.get("question")
    if q is not None and item.get("messages") is not None:
        raise RequestProblem(422, "send 'question' or 'messages', not both")
    if q is None and "messages" in item:
        check_message_count(item["messages"], settings.server_max_messages)
        item = {**item, "messages": typed_messages(item["messages"])}
        last = item["messages"][-1]
        q = last["content"] if last["type"] == "human" else None
        if not isinstance(q, str):
            raise RequestProblem(
                422, "'messages' must be a non-empty list ending in a human message with text content"
            )
    if not isinstance(q, str):
        raise RequestProblem(422, "'question' must be a string")
    if not q.strip():
        raise RequestProblem(422, "'question' must not be empty")
    if len(q) > settings.server_max_question_chars:
        limit = settings.server_max_question_chars
        raise RequestProblem(413, f"question of {len(q)} characters exceeds the limit of {limit}")
    meta = item.get("metadata")
    if meta is not None and not isinstance(meta, dict):
        raise RequestProblem(422, "'metadata' must be an object")
    if needs_gold and not (meta or {}).get("golden_answers"):
        raise RequestProblem(422, ORACLE_NEEDS_GOLD_SERVED)
    return item


def checked_payload(op: str, payload: Any, settings: Settings, *, needs_gold: bool = False) -> Any:
    """A graph call's body, checked (:class:`RequestProblem` when it cannot run), with its inputs
    as the graph reads them. ``needs_gold``: the served policy is the oracle, which cannot run a
    question without golden answers."""
    if not isinstance(payload, dict):
        raise RequestProblem(422, "the request body must be a JSON object")
    if op == "batch":
        inputs = payload.get("inputs")
        if not isinstance(inputs, list) or not inputs:
            raise RequestProblem(422, "'inputs' must be a non-empty list")
        if len(inputs) > settings.server_max_batch:
            raise RequestProblem(
                413, f"batch of {len(inputs)} exceeds the limit of {settings.server_max_batch}"
            )
        return {**payload, "inputs": [_checked_input(i, settings, needs_gold) for i in inputs]}
    return {**payload, "input": _checked_input(payload.get("input"), settings, needs_gold)}


def check_payload(
    op: str, payload: Any, settings: Settings, *, needs_gold: bool = False
) -> tuple[int, str] | None:
    """Why a graph call's body cannot be run (status, message), or None."""
    try:
        checked_payload(op, payload, settings, needs_gold=needs_gold)
    except RequestProblem as p:
        return p.status, p.detail
    return None


class WatchedSend:
    """The app's ``send`` for a graph call: the body is cut at ``limit`` bytes (an invoke past it
    becomes a 422, a stream ends with an error event and the app is told the client left, so it
    stops as for a dropped stream: no exception runs through the stream's generators), and
    LangServe's generic stream error event is held until the error behind it is known, so an
    upstream failure can be named in it."""

    def __init__(self, send: Any, limit: int | None):
        self.send, self.limit = send, limit
        self.sent = 0
        self.streaming = self.closed = False
        self.held: dict[str, Any] | None = None
        self.cut = asyncio.Event()

    def _too_large(self) -> str:
        return (
            f"the response passed this server's limit of {self.limit} bytes (server_max_response_bytes); "
            "ask for fewer passages (top_k, passage_budget) or sub-queries (max_subqueries)"
        )

    async def __call__(self, message: dict[str, Any]) -> None:
        if self.closed:
            return
        if message["type"] == "http.response.start":
            length = dict(message.get("headers") or []).get(b"content-length")
            if self.limit is not None and length is not None and int(length) > self.limit:
                self.closed = True  # the work is done; its answer is not sent
                return await json_reply(self.send, 422, self._too_large())
            self.streaming = length is None
            return await self.send(message)
        body = message.get("body", b"")
        if self.streaming and body.startswith(b"event: error"):
            self.held = message  # the exception behind it comes next
            return
        await self.flush()
        self.sent += len(body)
        if self.limit is not None and self.sent > self.limit and self.streaming:
            await self.end_stream(422, self._too_large())
            self.cut.set()
            return
        await self.send(message)

    def receive_for(self, receive: Any) -> Any:
        """``receive`` that answers ``http.disconnect`` once the stream was cut, so the app stops."""

        async def wrapped() -> dict[str, Any]:
            if self.cut.is_set():
                return {"type": "http.disconnect"}
            message = asyncio.ensure_future(receive())
            cut = asyncio.ensure_future(self.cut.wait())
            await asyncio.wait({message, cut}, return_when=asyncio.FIRST_COMPLETED)
            for task in (message, cut):
                if not task.done():
                    task.cancel()
            return (
                message.result()
                if message.done() and not message.cancelled()
                else {"type": "http.disconnect"}
            )

        return wrapped

    async def flush(self) -> None:
        if self.held is not None:
            held, self.held = self.held, None
            await self.send(held)

    async def end_stream(self, status: int, detail: str, **extra: Any) -> None:
        """End the stream with one error event (LangServe's shape: ``status_code`` and ``message``)."""
        data = json.dumps({"status_code": status, "message": detail, **extra})
        body = f"event: error\r\ndata: {data}\r\n\r\n".encode()
        self.closed, self.held = True, None
        await self.send({"type": "http.response.body", "body": body, "more_body": False})


def endpoint_threads(body: Any) -> list[str]:
    """The thread an OpenAI-compatible request names (``parallelsearch.thread_id``), for its lock."""
    ext = body.get("parallelsearch") if isinstance(body, dict) else None
    tid = ext.get("thread_id") if isinstance(ext, dict) else None
    return [tid] if isinstance(tid, str) and tid else []


class RequestGuard:
    """Host and content type, API key, body limits, input checks, thread locks, admission, the
    response cap and error ids (see the module docstring). ``calls``: graph calls outside LangServe
    (the OpenAI-compatible endpoint) by path, each with its own body check."""

    def __init__(
        self,
        app: Any,
        settings: Settings,
        admission: AdmissionQueue,
        routes: set[str],
        needs_gold: bool = False,
        key_failures: KeyFailures | None = None,
        thread_locks: ThreadLocks | None = None,
        calls: Mapping[str, PayloadCheck] | None = None,
    ):
        self.app = app
        self.s = settings
        self.admission = admission
        self.routes = frozenset(routes)
        self.needs_gold = needs_gold
        self.key_failures = key_failures or settings.key_failures()
        self.thread_locks = thread_locks or ThreadLocks(
            settings.server_multitask_strategy, settings.server_queue_timeout_s
        )
        hosts = settings.server_allowed_hosts
        self.allowed_hosts = None if hosts is None else frozenset(map(host_name, hosts))
        self.caps = RequestCaps.of(settings)
        self.calls = dict(calls or {})

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        await call_with_error_id(self._guarded, scope, receive, send, log)

    async def _guarded(self, scope: Any, receive: Any, send: Any) -> None:
        path: str = scope["path"]
        client_receive = receive  # the replayed body is for the app; disconnects come from here
        problem = browser_problem(scope, self.allowed_hosts)
        if problem:
            return await json_reply(send, *problem)
        if self.s.server_api_key and path not in OPEN_PATHS:
            if not await key_passes(scope, send, self.s.server_api_key, self.key_failures):
                return
        op = graph_call(scope["method"], path, self.routes)
        check = self.calls.get(path) if scope["method"] == "POST" else None
        op = path if check is not None else op
        threads: list[str] = []
        if scope["method"] in BODY_METHODS:
            try:
                body = await read_body(scope, receive, max_bytes=self.s.server_max_body_bytes)
                parsed = await parse_json_body(body, max_depth=self.s.server_max_json_depth)
            except BodyRejected as e:
                return await json_reply(send, e.status, e.detail)
            if parsed.error or not body:
                return await json_reply(send, 400, parsed.error or "malformed JSON: the body is empty")
            if check is not None:  # an endpoint's own body check (the OpenAI-compatible one)
                problem = check(parsed.value)
                if problem:
                    return await json_reply(send, *problem)
                threads = endpoint_threads(parsed.value)
            elif op is not None:
                try:
                    threads = await self._checked_call(op, parsed, path)
                except RequestProblem as p:
                    return await json_reply(send, p.status, p.detail)
            scope, receive = replaying(scope, parsed.raw, receive)
            scope[SCOPE_JSON] = parsed
        if op is None:
            return await self.app(scope, receive, send)
        await self._run(scope, receive, send, client_receive, threads)

    async def _checked_call(self, op: str, parsed: Any, path: str) -> list[str]:
        """Check a graph call's body (messages rewritten into the typed form, ``parsed`` updated) and
        return the threads it names; a large body is checked in a worker thread, off the loop."""

        def check() -> list[str]:
            value = checked_payload(op, parsed.value, self.s, needs_gold=self.needs_gold)
            threads = checked_configurables(op, value, path, self.caps)
            if value != parsed.value:  # messages rewritten into the typed form
                parsed.value, parsed.raw = value, json.dumps(value, ensure_ascii=False).encode()
            return threads

        if len(parsed.raw) >= OFF_LOOP_BYTES:
            return await asyncio.to_thread(check)
        return check()

    async def _run(
        self, scope: Any, receive: Any, send: Any, client_receive: Any, threads: list[str]
    ) -> None:
        """The graph call: its threads held, admitted, its response watched."""
        parsed = scope[SCOPE_JSON].value
        # a batch's inputs (checked before) weigh one each; any other field of that name weighs 1
        inputs = parsed.get("inputs")
        weight = len(inputs) if isinstance(inputs, list) else 1

        async def gone() -> None:
            while (await client_receive())["type"] != "http.disconnect":
                pass

        watch = WatchedSend(send, self.s.server_max_response_bytes)
        try:
            async with self.thread_locks.hold(threads), self.admission.slot(weight, gone=gone):
                await self.app(scope, watch.receive_for(receive), watch)
        except ThreadBusy as b:
            await json_reply(send, b.status, b.detail, headers={"Retry-After": str(b.retry_after_s)})
        except Refused as r:
            await json_reply(send, 429, r.reason, headers={"Retry-After": str(r.retry_after_s)})
        except ClientGone:
            log.info("client left %s while its request waited in the queue", scope["path"])
        except Exception as exc:
            if watch.held is not None:  # a stream's error event: name what failed in it
                exc.error_id = uuid.uuid4().hex[:12]  # type: ignore[attr-defined]  # tagging any exception
                status, detail = upstream_failure(exc) or (500, "Internal Server Error")
                await watch.end_stream(status, detail, error_id=exc.error_id)  # type: ignore[attr-defined]  # set above
            raise
        else:
            await watch.flush()
            if watch.cut.is_set():
                log.info(
                    "cut the response to %s at %d bytes (server_max_response_bytes)",
                    scope["path"],
                    watch.sent,
                )
