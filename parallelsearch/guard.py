"""The request guard of the LangServe app: what a public endpoint needs, for every graph route.

Pure ASGI middleware (``app.add_middleware(RequestGuard, ...)``), so streaming passes untouched.
In order: the API key, body limits, the graph call's input checks, admission, and one JSON 500
with an ``error_id`` for an unhandled error (docs/architecture.md, "Guarding the servers").
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from parallelsearch.admission import AdmissionQueue, ClientGone, Refused
from parallelsearch.settings import Settings
from parallelsearch.stores.http.api_key import key_problem, refuse
from parallelsearch.stores.http.asgi_guard import (
    BODY_METHODS,
    SCOPE_JSON,
    BodyRejected,
    call_with_error_id,
    json_reply,
    parse_json_body,
    read_body,
    replaying,
)

log = logging.getLogger("parallelsearch.server")

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


def _last_message_text(messages: Any) -> str | None:
    """The text of the last message when it is a human one (a LangChain message dict or a
    ``[role, text]`` pair), else None: the graph takes it as the question."""
    if not isinstance(messages, list) or not messages:
        return None
    last = messages[-1]
    if isinstance(last, list | tuple) and len(last) == 2:
        role, text = last
    elif isinstance(last, dict):
        role, text = last.get("type", last.get("role")), last.get("content")
    else:
        return None
    return text if role in ("human", "user") and isinstance(text, str) else None


def check_payload(
    op: str, payload: Any, settings: Settings, *, needs_gold: bool = False
) -> tuple[int, str] | None:
    """Why a graph call's body cannot be run (status, message), or None. ``needs_gold``: the
    served policy is the oracle, which cannot run a question without golden answers."""
    if not isinstance(payload, dict):
        return 422, "the request body must be a JSON object"
    if op == "batch":
        inputs = payload.get("inputs")
        if not isinstance(inputs, list) or not inputs:
            return 422, "'inputs' must be a non-empty list"
        if len(inputs) > settings.server_max_batch:
            return 413, f"batch of {len(inputs)} exceeds the limit of {settings.server_max_batch}"
    else:
        inputs = [payload.get("input")]
    for item in inputs:
        if not isinstance(item, dict):
            return 422, "each input must be an object with a 'question' string"
        q = item.get("question")
        if q is None and "messages" in item:
            q = _last_message_text(item["messages"])
            if q is None:
                return 422, "'messages' must be a non-empty list ending in a human message with text content"
        if not isinstance(q, str):
            return 422, "'question' must be a string"
        if not q.strip():
            return 422, "'question' must not be empty"
        if len(q) > settings.server_max_question_chars:
            return (
                413,
                f"question of {len(q)} characters exceeds the limit of {settings.server_max_question_chars}",
            )
        meta = item.get("metadata")
        if meta is not None and not isinstance(meta, dict):
            return 422, "'metadata' must be an object"
        if needs_gold and not (meta or {}).get("golden_answers"):
            return 422, ORACLE_NEEDS_GOLD_SERVED
    return None


ORACLE_NEEDS_GOLD_SERVED = (
    "this server runs the oracle policy, which plans and answers from a question's dataset annotations: "
    "send metadata with golden_answers (and supporting_titles), pick one of the example questions on /ui, "
    "or start the server with a real model (parallelsearch serve --policy openai:MODEL@URL or chat:PROVIDER:MODEL)"
)


class RequestGuard:
    """API key, body limits, input checks, admission and error ids (see the module docstring).
    ``calls``: graph calls outside LangServe (the OpenAI-compatible endpoint) by path, each
    with its own body check."""

    def __init__(
        self,
        app: Any,
        settings: Settings,
        admission: AdmissionQueue,
        routes: set[str],
        needs_gold: bool = False,
        calls: Mapping[str, PayloadCheck] | None = None,
    ):
        self.app = app
        self.s = settings
        self.admission = admission
        self.routes = frozenset(routes)
        self.needs_gold = needs_gold
        self.calls = dict(calls or {})

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        await call_with_error_id(self._guarded, scope, receive, send, log)

    async def _guarded(self, scope: Any, receive: Any, send: Any) -> None:
        path: str = scope["path"]
        client_receive = receive  # the replayed body is for the app; disconnects come from here
        if self.s.server_api_key and path not in OPEN_PATHS:
            problem = key_problem(scope.get("headers") or [], self.s.server_api_key)
            if problem:
                return await refuse(send, problem)
        op = graph_call(scope["method"], path, self.routes)
        check = self.calls.get(path) if scope["method"] == "POST" else None
        op = path if check is not None else op
        if scope["method"] in BODY_METHODS:
            try:
                body = await read_body(scope, receive, max_bytes=self.s.server_max_body_bytes)
                parsed = await parse_json_body(body, max_depth=self.s.server_max_json_depth)
            except BodyRejected as e:
                return await json_reply(send, e.status, e.detail)
            if op is not None:
                if parsed.error or not body:
                    return await json_reply(send, 400, parsed.error or "malformed JSON: the body is empty")
                if check is not None:
                    problem = check(parsed.value)
                else:
                    problem = check_payload(op, parsed.value, self.s, needs_gold=self.needs_gold)
                if problem:
                    return await json_reply(send, *problem)
            scope, receive = replaying(scope, parsed.raw, receive)
            scope[SCOPE_JSON] = parsed
        if op is None:
            return await self.app(scope, receive, send)
        weight = len(parsed.value["inputs"]) if op == "batch" else 1

        async def gone() -> None:
            while (await client_receive())["type"] != "http.disconnect":
                pass

        try:
            async with self.admission.slot(weight, gone=gone):
                await self.app(scope, receive, send)
        except Refused as r:
            await json_reply(send, 429, r.reason, headers={"Retry-After": str(r.retry_after_s)})
        except ClientGone:
            log.info("client left %s while its request waited in the queue", path)
