"""Reading an OpenAI chat completions request for the agent: the messages become LangChain
messages, ``model`` names a graph route, OpenAI's sampling fields and the ``parallelsearch``
extension object become the graph's per-request knobs. Every problem is a
:class:`RequestProblem` naming the field, so the guard answers it before admission
(docs/architecture.md, "The OpenAI-compatible endpoint")."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage

from parallelsearch.graphs.agent import closest
from parallelsearch.graphs.config import PER_REQUEST_KEYS, request_overrides
from parallelsearch.serving.request_checks import (
    ORACLE_NEEDS_GOLD_SERVED,
    RequestCaps,
    RequestProblem,
    check_message_count,
)
from parallelsearch.stores.errors import did_you_mean

CHAT_PATH = "/v1/chat/completions"
#: the request's own extension object (graph knobs, thread, metadata), beside OpenAI's fields
EXTENSION = "parallelsearch"
#: what the extension object may hold besides the per-request knobs
EXTENSION_KEYS = ("thread_id", "metadata")
#: OpenAI's names for graph knobs (the later name wins when both are sent)
KNOB_ALIASES = {"max_tokens": "max_new_tokens", "max_completion_tokens": "max_new_tokens"}
#: OpenAI's sampling fields with the graph knob's own name
SAMPLING = ("temperature", "top_p")
#: roles as OpenAI sends them -> what reads them
ROLES = ("system", "developer", "user", "assistant", "tool")


@dataclass(frozen=True)
class RequestRules:
    """What the server accepts: its models (graph routes), the question length, whether it keeps
    threads, and whether its policy (the oracle) needs golden answers in ``metadata``."""

    models: tuple[str, ...]
    max_question_chars: int
    keeps_threads: bool = False
    needs_gold: bool = False
    #: the operator's per-request limits, the same the LangServe routes apply
    caps: RequestCaps = field(default_factory=RequestCaps)
    #: the most messages one request may carry (``server_max_messages``), as on the LangServe routes
    max_messages: int = 1000


@dataclass(frozen=True)
class ChatRequest:
    """A valid request, as the graph takes it."""

    model: str
    messages: list[BaseMessage]
    stream: bool = False
    include_usage: bool = False
    knobs: dict[str, Any] = field(default_factory=dict)
    thread_id: str | None = None
    metadata: dict[str, Any] | None = None

    def graph_input(self) -> dict[str, Any]:
        return {"messages": self.messages, **({"metadata": self.metadata} if self.metadata else {})}

    def graph_config(self) -> dict[str, Any]:
        thread = {"thread_id": self.thread_id} if self.thread_id else {}
        return {"configurable": {**self.knobs, **thread}}


def _bad(message: str) -> RequestProblem:
    return RequestProblem(400, message)


def _text(content: Any, where: str) -> str:
    """A message's text: a string, or a list of text parts (joined by newlines)."""
    if content is None or isinstance(content, str):
        return content or ""
    if not isinstance(content, list):
        raise _bad(f"{where} must be a string or a list of text parts, got {type(content).__name__}")
    texts = []
    for j, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else type(part).__name__
        if kind != "text":
            raise _bad(f"{where}[{j}]: only text parts are supported here, got {kind!r}")
        if not isinstance(part.get("text"), str):
            got = type(part.get("text")).__name__ if "text" in part else "no 'text'"
            raise _bad(f"{where}[{j}]: a text part's 'text' must be a string, got {got}")
        texts.append(part["text"])
    return "\n".join(texts)


def _tool_calls(calls: Any, where: str) -> list[dict[str, Any]]:
    """An assistant message's ``tool_calls`` (OpenAI's, arguments as JSON text) as LangChain's."""
    if calls is None:
        return []
    if not isinstance(calls, list):
        raise _bad(f"{where} must be a list")
    out = []
    for j, call in enumerate(calls):
        fn = call.get("function") if isinstance(call, dict) else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str) or not call.get("id"):
            raise _bad(
                f"{where}[{j}] must be {{'id', 'type': 'function', 'function': {{'name', 'arguments'}}}}"
            )
        try:
            args = json.loads(fn.get("arguments") or "{}")
        except (TypeError, ValueError) as e:
            raise _bad(f"{where}[{j}].function.arguments is not JSON: {e}") from e
        if not isinstance(args, dict):
            raise _bad(f"{where}[{j}].function.arguments must be a JSON object")
        out.append({"name": fn["name"], "args": args, "id": str(call["id"])})
    return out


def to_message(msg: Any, i: int) -> BaseMessage:
    """``messages[i]`` as a LangChain message, or a :class:`RequestProblem` naming the field."""
    where = f"messages[{i}]"
    if not isinstance(msg, dict):
        raise _bad(f"{where} must be an object with 'role' and 'content'")
    role = msg.get("role")
    if role not in ROLES:
        raise _bad(f"{where}.role {role!r} is not one of {', '.join(ROLES)}")
    text = _text(msg.get("content"), f"{where}.content")
    name = msg.get("name") if isinstance(msg.get("name"), str) else None
    if role in ("system", "developer"):
        return SystemMessage(content=text)
    if role == "user":
        return HumanMessage(content=text, name=name)
    if role == "assistant":
        return AIMessage(
            content=text, name=name, tool_calls=_tool_calls(msg.get("tool_calls"), f"{where}.tool_calls")
        )
    call_id = msg.get("tool_call_id")
    if not isinstance(call_id, str) or not call_id:
        raise _bad(f"{where}.tool_call_id is required for a tool message")
    return ToolMessage(content=text, tool_call_id=call_id)


def _messages(given: Any, max_chars: int) -> list[BaseMessage]:
    """The conversation; the last message is the user's question, not empty and not too long."""
    if not isinstance(given, list) or not given:
        raise _bad("messages must be a non-empty list of {'role', 'content'} objects")
    messages = [to_message(m, i) for i, m in enumerate(given)]
    last = messages[-1]
    if not isinstance(last, HumanMessage):
        raise _bad(
            f"messages[{len(given) - 1}].role must be 'user': the last message is the question, got {given[-1]['role']!r}"
        )
    question = str(last.content)
    if not question.strip():
        raise _bad(f"messages[{len(given) - 1}].content must not be empty: it is the question")
    if len(question) > max_chars:
        raise RequestProblem(
            413,
            f"messages[{len(given) - 1}].content: a question of {len(question)} characters exceeds the limit of {max_chars}",
        )
    return messages


#: OpenAI fields the agent cannot honour, refused by name rather than ignored: the values it
#: can honour, and why
CANNOT_HONOUR: dict[str, tuple[tuple[Any, ...], str]] = {
    "n": ((None, 1), "the agent gives one answer per request"),
    "tools": ((None, []), "the agent calls its own search tool only; it cannot call a client's tools"),
    "functions": (
        (None, []),
        "the agent calls its own search tool only; it cannot call a client's functions",
    ),
    "tool_choice": ((None, "none", "auto"), "the agent decides its own searches"),
    "response_format": ((None, {"type": "text"}), "the answer is the model's text"),
    "logprobs": ((None, False), "an answer spans several model calls"),
    "modalities": ((None, ["text"]), "the agent answers in text"),
}


def _refuse_what_cannot_be_honoured(body: Mapping[str, Any]) -> None:
    for key, (fine, why) in CANNOT_HONOUR.items():
        if key in body and body[key] not in fine:
            raise _bad(f"{key}={json.dumps(body[key])[:80]} is not supported: {why}")


def _knob(knob: str, value: Any, where: str) -> Any:
    try:
        return request_overrides({knob: value})[knob]
    except ValueError as e:
        raise _bad(f"{where}: {e}") from e


#: OpenAI's own ranges of its sampling fields (narrower than the graph's knobs allow)
OPENAI_RANGES: dict[str, tuple[float, float]] = {"temperature": (0.0, 2.0), "top_p": (0.0, 1.0)}


def _in_openai_range(name: str, value: Any) -> None:
    low, high = OPENAI_RANGES.get(name, (None, None))
    if low is not None and isinstance(value, int | float) and not low <= value <= high:
        raise _bad(f"{name}: {value!r} is out of range: OpenAI's {name} is between {low:g} and {high:g}")


def _knobs(body: Mapping[str, Any], ext: Mapping[str, Any]) -> dict[str, Any]:
    """OpenAI's ``max_tokens``/``max_completion_tokens``, ``temperature``, ``top_p``, then the
    extension's knobs over them; each validated with OpenAI's range and the graph's own bounds."""
    knobs: dict[str, Any] = {}
    for name, knob in [*KNOB_ALIASES.items(), *((s, s) for s in SAMPLING)]:
        if body.get(name) is not None:
            _in_openai_range(name, body[name])
            knobs[knob] = _knob(knob, body[name], name)
    for key in PER_REQUEST_KEYS:
        if ext.get(key) is not None:
            knobs[key] = _knob(key, ext[key], f"{EXTENSION}.{key}")
    return knobs


def _extension(body: Mapping[str, Any]) -> dict[str, Any]:
    """The ``parallelsearch`` object: our namespace, so an unknown key in it is refused."""
    ext = body.get(EXTENSION)
    if ext is None:
        return {}
    known = (*PER_REQUEST_KEYS, *EXTENSION_KEYS)
    if not isinstance(ext, dict):
        raise _bad(f"{EXTENSION} must be an object with any of: {', '.join(known)}")
    for key in ext:
        if key not in known:
            close = closest(key, known)
            hint = f" (did you mean {close!r}?)" if close else ""
            raise _bad(f"{EXTENSION}.{key} is not a field{hint}; it takes {', '.join(known)}")
    return ext


def _thread_id(ext: Mapping[str, Any], rules: RequestRules) -> str | None:
    from parallelsearch.serving.thread_routes import check_thread_id

    tid = ext.get("thread_id")
    if tid in (None, ""):
        return None
    if not rules.keeps_threads:
        raise _bad(
            f"{EXTENSION}.thread_id: this server keeps no threads (server_checkpointer=none); send none"
        )
    try:
        return check_thread_id(tid)
    except ValueError as e:
        raise _bad(f"{EXTENSION}.thread_id: {e}") from e


def _metadata(ext: Mapping[str, Any], rules: RequestRules) -> dict[str, Any] | None:

    meta = ext.get("metadata")
    if meta is not None and not isinstance(meta, dict):
        raise _bad(f"{EXTENSION}.metadata must be an object")
    if rules.needs_gold and not (meta or {}).get("golden_answers"):
        raise _bad(f"{EXTENSION}.metadata: {ORACLE_NEEDS_GOLD_SERVED}")
    return meta


def _model(body: Mapping[str, Any], rules: RequestRules) -> str:
    model = body.get("model")
    models = ", ".join(rules.models)
    if model is None or model == "":
        raise _bad(f"model is required: one of {models}")
    if not isinstance(model, str):
        raise _bad(f"model must be a string, got {json.dumps(model)[:40]}: one of {models}")
    if model not in rules.models:
        raise RequestProblem(
            404,
            f"model {model!r} does not exist{did_you_mean(model, rules.models)}; the models here are {models}",
        )
    return model


def _stream(body: Mapping[str, Any]) -> tuple[bool, bool]:
    """``stream`` and ``stream_options.include_usage``."""
    stream, opts = body.get("stream"), body.get("stream_options")
    if stream is not None and not isinstance(stream, bool):
        raise _bad("stream must be true or false")
    if opts is not None and not isinstance(opts, dict):
        raise _bad("stream_options must be an object")
    return bool(stream), bool((opts or {}).get("include_usage"))


def read_chat_request(body: Any, rules: RequestRules) -> ChatRequest:
    """``body`` as a :class:`ChatRequest`, or a :class:`RequestProblem` naming the first bad field.
    OpenAI fields not named here (``user``, ``stop``, ``seed``, penalties, ...) are ignored."""
    if not isinstance(body, dict):
        raise _bad("the request body must be a JSON object")
    model = _model(body, rules)
    check_message_count(body.get("messages"), rules.max_messages)
    messages = _messages(body.get("messages"), rules.max_question_chars)
    _refuse_what_cannot_be_honoured(body)
    stream, include_usage = _stream(body)
    ext = _extension(body)
    knobs = _knobs(body, ext)
    capped = rules.caps.problem(knobs, where=EXTENSION)
    if capped:
        raise _bad(capped)
    return ChatRequest(
        model=model,
        messages=messages,
        stream=stream,
        include_usage=include_usage,
        knobs=knobs,
        thread_id=_thread_id(ext, rules),
        metadata=_metadata(ext, rules),
    )


def request_check(rules: RequestRules) -> Callable[[Any], tuple[int, str] | None]:
    """The guard's check of a chat completions body: (status, message) or None."""

    def check(body: Any) -> tuple[int, str] | None:
        try:
            read_chat_request(body, rules)
        except RequestProblem as e:
            return e.status, str(e)
        return None

    return check
