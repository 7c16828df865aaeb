"""An episode in OpenAI's wire format: the completion, its stream chunks, and the
``parallelsearch`` trace beside OpenAI's fields (the sub-queries with their passages, the
episode's messages with their tool calls). The answer is a plain assistant message, so a
chat frontend never mistakes searches the agent already ran for tool calls it must run
(docs/architecture.md, "The OpenAI-compatible endpoint")."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, SystemMessage, ToolMessage

from parallelsearch.agents.protocol import content_text
from parallelsearch.serving.openai_request import EXTENSION

#: the episode's counts the trace carries
COUNTS = ("policy_calls", "search_rounds", "subqueries", "passages", "errors", "total_ms")
#: what the trace shows of a passage
PASSAGE_KEYS = ("id", "title", "text", "score", "store")


def openai_tool_call(call: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "id": call.get("id"),
        "type": "function",
        "function": {"name": call.get("name"), "arguments": json.dumps(call.get("args") or {})},
    }


def openai_message(m: BaseMessage) -> dict[str, Any]:
    """A LangChain message as OpenAI's API writes it (what a client sends back next turn)."""
    text = content_text(m.content)
    if isinstance(m, AIMessage):
        out: dict[str, Any] = {"role": "assistant", "content": text or None}
        if m.tool_calls:
            out["tool_calls"] = [openai_tool_call(c) for c in m.tool_calls]
    elif isinstance(m, ToolMessage):
        out = {"role": "tool", "tool_call_id": m.tool_call_id, "content": text}
    elif isinstance(m, SystemMessage):
        out = {"role": "system", "content": text}
    else:
        out = {"role": "user", "content": text}
    if m.name:
        out["name"] = m.name
    return out


def episode_messages(state: Mapping[str, Any]) -> list[BaseMessage]:
    """What this episode added after its question: the AI turns with their tool calls, one tool
    message per call, the answer (under a text protocol, the answer alone)."""
    messages: Sequence[BaseMessage] = state.get("messages") or []
    asked = ((state.get("history") or [{}])[-1]).get("asked")
    at = next((i for i, m in enumerate(messages) if asked is not None and m.id == asked), None)
    return (
        list(messages[at + 1 :]) if at is not None else [m for m in messages[-1:] if isinstance(m, AIMessage)]
    )


def answer_message(state: Mapping[str, Any]) -> AIMessage | None:
    last = (state.get("messages") or [None])[-1]
    return last if isinstance(last, AIMessage) else None


def search_row(row: Mapping[str, Any]) -> dict[str, Any]:
    """One sub-query's search: where it ran, what it was, its passages or its error."""
    return {
        "round": row.get("round"),
        "index": row.get("index"),
        "query": row.get("query"),
        "error": row.get("error"),
        "passages": [{k: p.get(k) for k in PASSAGE_KEYS} for p in row.get("passages") or []],
    }


def searches(state: Mapping[str, Any]) -> list[dict[str, Any]]:
    rows = sorted(state.get("results") or [], key=lambda r: (r.get("round") or 0, r.get("index") or 0))
    return [search_row(r) for r in rows]


def trace(state: Mapping[str, Any], thread_id: str | None) -> dict[str, Any]:
    """The ``parallelsearch`` object of a reply: status, counts, searches, the episode's messages."""
    out: dict[str, Any] = {"status": state.get("status"), **{k: state.get(k) for k in COUNTS}}
    out["searches"] = searches(state)
    out["messages"] = [openai_message(m) for m in episode_messages(state)]
    if thread_id:
        out["thread_id"] = thread_id
    return out


#: characters per token of an estimated count (LangChain's ``count_tokens_approximately``)
CHARS_PER_TOKEN = 4


def estimated_tokens(segments: Sequence[Sequence[str]]) -> tuple[int, int]:
    """``(prompt, completion)`` tokens of an episode's model calls estimated from its text: each
    policy turn read everything before it and wrote its own text."""
    read = prompt = completion = 0
    for role, text in segments:
        n = -(-len(text) // CHARS_PER_TOKEN)
        if role == "policy":
            prompt, completion = prompt + read, completion + n
        read += n
    return prompt, completion


def usage(state: Mapping[str, Any]) -> dict[str, Any]:
    """The episode's tokens over all its model calls. A count the policy does not report (a
    scripted policy, a chat model without usage metadata) is estimated from the episode's text,
    and the usage says so (``"estimated": true``): OpenAI clients read the counts as numbers."""
    prompt, completion = state.get("tokens_in"), state.get("tokens_out")
    out: dict[str, Any] = {}
    if prompt is None or completion is None:
        guess = estimated_tokens(state.get("segments") or [])
        prompt = guess[0] if prompt is None else prompt
        completion = guess[1] if completion is None else completion
        out["estimated"] = True
    total = {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}
    return total | out


def completion(rid: str, model: str, created: int, state: Mapping[str, Any], thread_id: str | None) -> dict:
    """A ``chat.completion``: the answer as the one choice, the trace beside it."""
    answer = answer_message(state)
    out: dict[str, Any] = {
        "id": rid,
        "object": "chat.completion",
        "created": created,
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content_text(answer.content) if answer else ""},
                "finish_reason": "stop",
            }
        ],
        EXTENSION: trace(state, thread_id),
    }
    out["usage"] = usage(state)
    return out


def chunk(
    rid: str,
    model: str,
    created: int,
    delta: dict[str, Any] | None = None,
    finish: str | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """A ``chat.completion.chunk`` with one choice (``delta=None``: none, as the usage chunk)."""
    choices = [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": finish}]
    out = {
        "id": rid,
        "object": "chat.completion.chunk",
        "created": created,
        "model": model,
        "choices": choices,
    }
    return {**out, **extra}


def sse(payload: Any) -> str:
    """One server-sent event, as OpenAI streams them."""
    return f"data: {json.dumps(payload, ensure_ascii=False, default=str)}\n\n"


DONE = "data: [DONE]\n\n"
