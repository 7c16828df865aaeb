"""Chat messages as the gateway compares and answers them: a request's history is checked
message by message against what the session recorded (tool arguments as parsed JSON, content
``None`` equal to ``""``, names and other extras ignored); a generated turn is read with the
project's Hermes reader into an OpenAI assistant message."""

from __future__ import annotations

import json
from typing import Any

from parallelsearch.agents.protocol import read_tool_call_blocks, server_reads_calls
from parallelsearch.rl.gateway.errors import GatewayError

#: the roles a request may add after the session's last reply
NEW_ROLES = ("tool", "user", "system")


def _args(value: Any) -> Any:
    """Tool arguments as parsed JSON (text that is not JSON stays text; an empty string is no
    arguments, as LangChain reads it)."""
    if isinstance(value, str) and not value.strip():
        return {}
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def _content(value: Any) -> Any:
    """Content as compared: None is "", a list of text parts is their text."""
    if value is None:
        return ""
    if isinstance(value, list):
        parts = [p.get("text", "") if isinstance(p, dict) else str(p) for p in value]
        return "".join(parts)
    return value


def canonical(message: Any, where: str) -> dict[str, Any]:
    """The parts of a message that decide its tokens, in one comparable form."""
    if not isinstance(message, dict) or not isinstance(message.get("role"), str):
        raise GatewayError(400, f"{where} must be an object with a 'role'", "messages")
    out: dict[str, Any] = {"role": message["role"], "content": _content(message.get("content"))}
    calls = message.get("tool_calls") or []
    if calls:
        out["tool_calls"] = [
            {
                "id": c.get("id"),
                "name": (c.get("function") or {}).get("name"),
                "args": _args((c.get("function") or {}).get("arguments")),
            }
            for c in calls
            if isinstance(c, dict)
        ]
    if message.get("tool_call_id") is not None:
        out["tool_call_id"] = message["tool_call_id"]
    return out


def canonical_all(messages: Any) -> list[dict[str, Any]]:
    if not isinstance(messages, list) or not messages:
        raise GatewayError(400, "'messages' must be a non-empty list", "messages")
    return [canonical(m, f"messages[{i}]") for i, m in enumerate(messages)]


def template_message(message: dict[str, Any]) -> dict[str, Any]:
    """A request message as the chat template gets it: content never None, arguments parsed
    (templates such as Qwen's write them with ``tojson``)."""
    out = dict(message)
    out["content"] = _content(message.get("content"))
    if message.get("tool_calls"):
        out["tool_calls"] = [
            {**c, "function": {**c["function"], "arguments": _args(c["function"].get("arguments"))}}
            for c in message["tool_calls"]
            if isinstance(c, dict) and isinstance(c.get("function"), dict)
        ]
    return out


def read_reply(text: str, end: str, turn: int) -> dict[str, Any]:
    """A generated turn (decoded, special tokens kept) as an OpenAI assistant message, as vLLM's
    Hermes parser answers it: the text before the first ``<tool_call>`` as content and each block
    as a call; when a block is not a call it can read, the whole turn as content and no call (so
    the client's next request repeats exactly what the model wrote)."""
    body = text[: -len(end)] if end and text.endswith(end) else text
    if not server_reads_calls(body):
        return {"role": "assistant", "content": body or None}
    content, calls = read_tool_call_blocks(body)
    message: dict[str, Any] = {"role": "assistant", "content": content or None}
    if calls:
        message["tool_calls"] = [_openai_call(c, f"call_{turn}_{i}") for i, c in enumerate(calls)]
    return message


def _openai_call(call: dict[str, Any], cid: str) -> dict[str, Any]:
    args = call.get("args")
    arguments = args if "error" in call and isinstance(args, str) else json.dumps(args, ensure_ascii=False)
    name = call.get("name") if isinstance(call.get("name"), str) else ""
    return {"id": cid, "type": "function", "function": {"name": name, "arguments": arguments}}
