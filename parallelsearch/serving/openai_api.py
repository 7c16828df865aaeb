"""The OpenAI-compatible endpoint of ``parallelsearch serve``: ``POST /v1/chat/completions``
(plain and ``stream: true``) and ``GET /v1/models`` (one model per graph route), so the OpenAI
Python client, Open WebUI and other chat frontends talk to the agent. The request's messages
are the graph's input messages, the final AI message's text is the reply, the searches ride
along in a ``parallelsearch`` field (docs/architecture.md, "The OpenAI-compatible endpoint").

The guard checks a request (:func:`parallelsearch.serving.openai_request.request_check`) before it
takes an admission slot; this module runs the graph and writes the reply.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Mapping
from typing import Any

from fastapi import HTTPException, Request

from parallelsearch.serving.openai_errors import error_body, upstream_problem
from parallelsearch.serving.openai_request import (
    CHAT_PATH,
    ChatRequest,
    RequestRules,
    read_chat_request,
    request_check,
)
from parallelsearch.serving.openai_stream import STREAM_MODES, sse_frames
from parallelsearch.serving.openai_wire import completion
from parallelsearch.serving.request_checks import RequestProblem
from parallelsearch.stores.http.asgi_guard import SCOPE_JSON

MODELS_PATH = "/v1/models"
__all__ = ["CHAT_PATH", "MODELS_PATH", "ChatCompletions", "RequestRules"]


def _json(payload: Any, status: int = 200) -> Any:
    from fastapi.responses import Response

    return Response(
        json.dumps(payload, ensure_ascii=False, default=str), status, media_type="application/json"
    )


def _error(status: int, message: str) -> Any:
    return _json(error_body(status, message), status)


class ChatCompletions:
    """The endpoint over ``graphs`` (route name -> the runnable LangServe serves there)."""

    def __init__(self, graphs: Mapping[str, Any], rules: RequestRules):
        self.graphs = dict(graphs)
        self.rules = rules
        self.created = int(time.time())
        self.check = request_check(rules)

    def model(self, name: str) -> dict[str, Any]:
        return {"id": name, "object": "model", "created": self.created, "owned_by": "parallelsearch"}

    def add_routes(self, app: Any) -> None:
        @app.get(MODELS_PATH, tags=["openai"])
        async def list_models() -> dict[str, Any]:
            """The graph routes as OpenAI models."""
            return {"object": "list", "data": [self.model(name) for name in self.graphs]}

        @app.get(MODELS_PATH + "/{model}", tags=["openai"])
        async def get_model(model: str) -> dict[str, Any]:
            if model not in self.graphs:
                raise HTTPException(
                    404, f"model {model!r} does not exist; the models here are {', '.join(self.graphs)}"
                )
            return self.model(model)

        @app.post(CHAT_PATH, tags=["openai"])
        async def chat_completions(request: Request) -> Any:
            """OpenAI's chat completions, answered by the agent (docs/serving.md)."""
            parsed = request.scope.get(SCOPE_JSON)
            body = parsed.value if parsed is not None else await request.json()
            try:
                req = read_chat_request(body, self.rules)
            except RequestProblem as e:
                return _error(e.status, str(e))
            return await self.answer(req)

    async def answer(self, req: ChatRequest) -> Any:
        """The reply to a valid request: a completion, or a stream of chunks."""
        graph = self.graphs[req.model]
        if req.thread_id and getattr(graph, "threaded", None) is None:
            return _error(503, "threads are not open (the server is starting or stopping); retry")
        rid, created = f"chatcmpl-{uuid.uuid4().hex}", int(time.time())
        if req.stream:
            return await self._stream(graph, req, rid, created)
        try:
            state: Any = {}
            async for values in graph.astream(req.graph_input(), req.graph_config(), stream_mode="values"):
                state = values
        except Exception as exc:
            problem = upstream_problem(exc)
            if problem is None:
                raise
            return _error(*problem)
        return _json(completion(rid, req.model, created, state, req.thread_id))

    async def _stream(self, graph: Any, req: ChatRequest, rid: str, created: int) -> Any:
        """The chunks as server-sent events; the status line waits for the first chunk, so a
        model server that fails at once is a 502/503 like a plain request's, not a broken stream."""
        from fastapi.responses import StreamingResponse

        parts = graph.astream(req.graph_input(), req.graph_config(), stream_mode=STREAM_MODES)
        frames = sse_frames(req, parts, rid, created)
        try:
            first = await anext(frames)
        except Exception as exc:
            problem = upstream_problem(exc)
            if problem is None:
                raise
            return _error(*problem)

        async def body() -> Any:
            try:
                yield first
                async for frame in frames:
                    yield frame
            finally:
                await frames.aclose()

        headers = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
        return StreamingResponse(body(), media_type="text/event-stream", headers=headers)
