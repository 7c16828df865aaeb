"""A graph run as OpenAI's stream of ``chat.completion.chunk`` events: the model's tokens as
they come (LangGraph's ``messages`` stream), each search's sub-queries when the planner makes
them and each sub-query's passages when its search ends (``updates``) in the chunks'
``parallelsearch`` field, and a last chunk with the whole trace (docs/architecture.md, "The
OpenAI-compatible endpoint")."""

from __future__ import annotations

import logging
import uuid
from collections.abc import AsyncIterator, Mapping
from typing import Any

from langchain_core.messages import AIMessage

from parallelsearch.agents.protocol import PROTOCOLS, content_text
from parallelsearch.serving.openai_request import EXTENSION, ChatRequest
from parallelsearch.serving.openai_wire import (
    DONE,
    answer_message,
    chunk,
    openai_tool_call,
    search_row,
    sse,
    trace,
    usage,
)

log = logging.getLogger("parallelsearch.serving")

#: what the stream reads of the run: tokens, node updates (the searches), the state (the end)
STREAM_MODES = ["messages", "updates", "values"]
#: between the words of two model replies in one streamed answer (a reply beside its searches)
TURN_GAP = "\n\n"


def speaks_chat(protocol: Any) -> bool:
    """Whether the run's protocol (its registry name) reads and writes chat messages: only then
    are the model's tokens the reply's words (a text protocol's are tags)."""
    cls = PROTOCOLS.get(protocol) if isinstance(protocol, str) else None
    return bool(cls is not None and cls.chat)


class ChunkWriter:
    """Turns one run's stream parts into chunk payloads (see the module docstring)."""

    def __init__(self, req: ChatRequest, rid: str, created: int):
        self.req, self.rid, self.created = req, rid, created
        self.state: Mapping[str, Any] = {}
        self.streamed: dict[Any, str] = {}  # each model reply's words sent so far, by message id
        self.spoken = False

    def chunk(self, delta: dict[str, Any] | None, finish: str | None = None, **extra: Any) -> dict[str, Any]:
        return chunk(self.rid, self.req.model, self.created, delta, finish, **extra)

    def opening(self) -> dict[str, Any]:
        return self.chunk({"role": "assistant", "content": ""})

    def on_part(self, mode: str, data: Any) -> list[dict[str, Any]]:
        if mode == "values":
            self.state = data
            return []
        if mode == "messages":
            return self._words(*data)
        return self._searches(data)

    def _words(self, msg: Any, meta: Mapping[str, Any]) -> list[dict[str, Any]]:
        """A model reply's tokens, when the planner speaks a chat protocol."""
        if not isinstance(msg, AIMessage) or meta.get("langgraph_node") != "planner":
            return []
        text = content_text(msg.content)
        if not text or not speaks_chat(self.state.get("protocol")):
            return []
        gap = TURN_GAP if self.spoken and msg.id not in self.streamed else ""
        self.streamed[msg.id] = self.streamed.get(msg.id, "") + text
        self.spoken = True
        return [self.chunk({"content": gap + text})]

    def _searches(self, update: Any) -> list[dict[str, Any]]:
        """A search as the planner asks for it; each sub-query's passages as its search ends."""
        out = []
        for node, upd in (update or {}).items() if isinstance(update, dict) else ():
            if not isinstance(upd, dict):
                continue
            act = upd.get("last_action") or {}
            if node == "planner" and act.get("kind") == "search":
                event: dict[str, Any] = {"event": "search", "round": self.state.get("round") or 0}
                event["queries"] = list(act.get("subqueries") or [])
                calls = [
                    c for m in upd.get("messages") or [] if isinstance(m, AIMessage) for c in m.tool_calls
                ]
                if calls:
                    event["tool_calls"] = [openai_tool_call(c) for c in calls]
                out.append(self.chunk({}, **{EXTENSION: event}))
            elif node == "search":
                for row in upd.get("results") or []:
                    out.append(self.chunk({}, **{EXTENSION: {"event": "result", **search_row(row)}}))
        return out

    def closing(self) -> list[dict[str, Any]]:
        """The answer's words not streamed yet (all of them under a text protocol), the last
        chunk with the trace, and the usage chunk when asked for."""
        answer = answer_message(self.state)
        text = content_text(answer.content) if answer is not None else ""
        said = self.streamed.get(answer.id, "") if answer is not None else ""
        rest = text[len(said) :] if text.startswith(said) else ""
        out = []
        if rest:
            out.append(self.chunk({"content": (TURN_GAP if self.spoken and not said else "") + rest}))
        done = {"event": "done", **trace(self.state, self.req.thread_id)}
        out.append(self.chunk({}, "stop", **{EXTENSION: done}))
        if self.req.include_usage:
            out.append(self.chunk(None, usage=usage(self.state)))
        return out


async def sse_frames(req: ChatRequest, parts: AsyncIterator[tuple[str, Any]], rid: str, created: int):
    """The run's SSE frames. An error before the first frame is raised (the caller answers it
    with a status); after it, the stream ends with OpenAI's error event instead of ``[DONE]``."""
    from parallelsearch.serving.openai_errors import error_object, upstream_problem

    writer = ChunkWriter(req, rid, created)
    started = False
    try:
        async for mode, data in parts:
            for payload in writer.on_part(mode, data):
                if not started:
                    started = True
                    yield sse(writer.opening())
                yield sse(payload)
        for i, payload in enumerate(writer.closing()):
            if not started and i == 0:
                started = True
                yield sse(writer.opening())
            yield sse(payload)
        yield DONE
    except Exception as exc:
        if not started:
            raise
        problem = upstream_problem(exc)
        if problem is None:
            error_id = uuid.uuid4().hex[:12]
            log.error("unhandled error %s in a chat completions stream", error_id, exc_info=exc)
            problem = (500, f"internal error (error_id {error_id})")
        yield sse({"error": error_object(*problem)})
    finally:
        close = getattr(parts, "aclose", None)
        if close is not None:
            await close()  # a client that left stops the run now, not when the generator is collected
