"""What a graph call may carry, checked strictly before the graph runs (docs/architecture.md,
"Guarding the servers"): its ``configurable`` (known keys only, strict types, the operator's
caps) and its inputs (a question, or messages in any form LangChain accepts, rewritten into the
typed form the graph's input schema reads). A client mistake is a 4xx naming the field.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, get_type_hints

from pydantic import BaseModel, ConfigDict, ValidationError, create_model

from parallelsearch.graphs.config import OPERATOR_CAPS, PER_REQUEST_KEYS, GraphContext

#: ``configurable`` keys that are no graph knob: the thread a run belongs to
THREAD_KEYS = ("thread_id",)
KNOWN_KEYS: tuple[str, ...] = (*PER_REQUEST_KEYS, *THREAD_KEYS)
#: a message's ``role`` (OpenAI's spelling, which LangChain accepts) -> its LangChain ``type``
ROLE_TYPES = {
    "user": "human",
    "human": "human",
    "assistant": "ai",
    "ai": "ai",
    "system": "system",
    "developer": "system",
    "tool": "tool",
}
#: the ``type`` of every message class in LangChain's ``AnyMessage`` (the graph's input schema)
MESSAGE_TYPES = frozenset(
    {"human", "ai", "system", "tool", "chat", "function"}
    | {f"{kind}MessageChunk" for kind in ("AI", "Human", "Chat", "System", "Function", "Tool")}
)

Problem = tuple[int, str]


class RequestProblem(ValueError):
    """A request that cannot run (a graph call or an OpenAI chat request): ``status`` and
    ``detail``, a message naming the field, are the answer."""

    def __init__(self, status: int, detail: str):
        super().__init__(detail)
        self.status, self.detail = status, detail


def check_message_count(messages: Any, limit: int) -> None:
    """A 413 when ``messages`` holds more than ``limit`` (``server_max_messages``): each one is
    parsed and kept, on every route that takes messages."""
    count = len(messages) if isinstance(messages, list) else 0
    if count > limit:
        raise RequestProblem(413, f"{count} messages exceed the limit of {limit} (server_max_messages)")


@dataclass(frozen=True)
class RequestCaps:
    """The operator's per-request limits, ``{knob: (cap, the setting that sets it)}``: a request
    asking for more is refused before any work starts. Empty: the knobs' declared bounds only."""

    limits: Mapping[str, tuple[float, str]] = field(default_factory=dict)

    @classmethod
    def of(cls, settings: Any) -> RequestCaps:
        """The caps a server's settings set: one per knob that declares an ``OperatorCap`` (a setting
        of None, such as ``server_max_history_messages: null``, caps nothing)."""
        caps = {knob: (getattr(settings, setting), setting) for knob, setting in OPERATOR_CAPS.items()}
        return cls({knob: cap for knob, cap in caps.items() if cap[0] is not None})  # None: no cap set

    def bounds(self, knobs: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
        """``knobs`` (their declared bounds) with this server's caps as their maxima, as a form
        and a client should read them."""
        out = dict(knobs)
        for key, (cap, _) in self.limits.items():
            if key in out:
                out[key] = {**out[key], "maximum": min(out[key].get("maximum", cap), cap)}
        return out

    def problem(self, values: Mapping[str, Any], where: str = "configurable") -> str | None:
        """What in ``values`` exceeds a cap, named as the request spelled it (``where.key``), or None."""
        for key, (cap, setting) in self.limits.items():
            if values.get(key) is not None and values[key] > cap:
                return f"{where}.{key}={values[key]} exceeds this server's limit of {cap} ({setting})"
        return None


def _configurable_model() -> type[BaseModel]:
    """``GraphContext``'s knobs plus ``thread_id``, strict (``true`` is no number, ``"3"`` no
    int) and closed: an unknown key is named, not silently ignored."""
    hints = get_type_hints(GraphContext, include_extras=True)
    fields: dict[str, Any] = {key: (hints[key], None) for key in PER_REQUEST_KEYS}
    fields["thread_id"] = (str | None, None)
    config = ConfigDict(strict=True, extra="forbid")
    return create_model("RequestConfigurable", __config__=config, **fields)


_CONFIGURABLE = _configurable_model()


def _named_with_hint(key: str) -> str:
    """``'topk' (did you mean 'top_k'?)``: an unknown key with the known one it most likely meant."""
    from parallelsearch.graphs.agent import closest

    meant = closest(key, KNOWN_KEYS)
    return f"{key!r}" + (f" (did you mean {meant!r}?)" if meant else "")


def check_configurable(configurable: Any, caps: RequestCaps) -> dict[str, Any]:
    """The request's ``configurable`` validated (None values dropped: "not given"), or
    :class:`RequestProblem` (422) naming the key."""
    if configurable is None:
        return {}
    if not isinstance(configurable, dict):
        raise RequestProblem(422, "config.configurable must be an object")
    unknown = sorted(k for k in configurable if k not in KNOWN_KEYS)
    if unknown:
        names = ", ".join(_named_with_hint(k) for k in unknown)
        raise RequestProblem(422, f"unknown configurable key(s) {names}; known: {', '.join(KNOWN_KEYS)}")
    given = {k: v for k, v in configurable.items() if v is not None}
    try:
        _CONFIGURABLE.model_validate(given)
    except ValidationError as e:
        problems = "; ".join(
            f"configurable.{'.'.join(str(x) for x in err['loc'])}: {err['msg']} (got {err.get('input')!r:.60})"
            for err in e.errors()
        )
        raise RequestProblem(422, problems) from None
    capped = caps.problem(given)
    if capped:
        raise RequestProblem(422, capped)
    return given


def config_from_hash(path: str) -> dict[str, Any] | None:
    """The config a ``/{route}/c/{hash}/{op}`` path carries (LangServe's lz-string), or None."""
    parts = [p for p in path.split("/") if p]
    if len(parts) < 4 or parts[1] != "c":
        return None
    from langserve.lzstring import LZString

    try:
        value = json.loads(LZString.decompressFromEncodedURIComponent(parts[2]) or "")
    except (ValueError, TypeError):
        raise RequestProblem(400, "the config hash in the path is not valid") from None
    if not isinstance(value, dict):
        raise RequestProblem(400, "the config hash in the path must hold an object")
    return value


def request_configs(op: str, payload: Mapping[str, Any], path: str) -> list[dict[str, Any]]:
    """Every config a graph call carries: the path's hash, then the body's (a batch may send one
    per input)."""
    configs: list[Any] = []
    hashed = config_from_hash(path)
    if hashed is not None:
        configs.append(hashed)
    body = payload.get("config")
    if op == "batch" and isinstance(body, list):
        configs.extend(body)
    elif body is not None:
        configs.append(body)
    for config in configs:
        if not isinstance(config, dict):
            raise RequestProblem(422, "config must be an object (a batch: an object or a list of objects)")
    return configs


def checked_configurables(op: str, payload: Mapping[str, Any], path: str, caps: RequestCaps) -> list[str]:
    """Check every ``configurable`` of the call; the thread ids it names (for the thread locks)."""
    threads = []
    for config in request_configs(op, payload, path):
        given = check_configurable(config.get("configurable"), caps)
        if isinstance(given.get("thread_id"), str) and given["thread_id"]:
            threads.append(given["thread_id"])
    return threads


def typed_message(message: Any, where: str) -> dict[str, Any]:
    """One input message in the typed form (``{"type": ..., "content": ...}``): LangChain's own
    forms (a typed dict, ``{"role", "content"}``, ``[role, content]``, a bare string) are accepted."""
    if isinstance(message, str):
        return {"type": "human", "content": message}
    if isinstance(message, list | tuple):
        if len(message) != 2 or not isinstance(message[0], str):
            raise RequestProblem(422, f"{where} must be [role, content], an object or a string")
        message = {"role": message[0], "content": message[1]}
    if not isinstance(message, dict):
        raise RequestProblem(422, f"{where} must be an object, [role, content] or a string")
    out = dict(message)
    if "type" not in out:
        role = out.pop("role", None)
        if role not in ROLE_TYPES:
            known = ", ".join(ROLE_TYPES)
            raise RequestProblem(422, f"{where}.role {role!r} is not a message role; use one of {known}")
        out["type"] = ROLE_TYPES[role]
    if out["type"] not in MESSAGE_TYPES:
        known = ", ".join(sorted(MESSAGE_TYPES))
        raise RequestProblem(422, f"{where}.type {out['type']!r} is not a message type; use one of {known}")
    if not isinstance(out.get("content"), str | list):
        raise RequestProblem(422, f"{where}.content must be a string or a list of content blocks")
    if out["type"] in ("ai", "AIMessageChunk") and out.get("tool_calls") is not None:
        out["tool_calls"] = typed_tool_calls(out["tool_calls"], f"{where}.tool_calls")
    if out["type"] in ("tool", "ToolMessageChunk") and not (
        isinstance(out.get("tool_call_id"), str) and out["tool_call_id"]
    ):
        raise RequestProblem(
            422, f"{where}.tool_call_id is required for a tool message (the call it answers)"
        )
    return out


def typed_tool_calls(calls: Any, where: str) -> list[dict[str, Any]]:
    """An AI message's ``tool_calls`` in LangChain's form (``{"name", "args", "id"}``; OpenAI's
    ``{"id", "function": {"name", "arguments"}}`` is read too), or a 422 naming the call at fault."""
    if not isinstance(calls, list):
        raise RequestProblem(422, f"{where} must be a list of calls, got {type(calls).__name__}")
    out = []
    for j, call in enumerate(calls):
        at = f"{where}[{j}]"
        if not isinstance(call, dict):
            raise RequestProblem(422, f"{at} must be an object with 'name' and 'args'")
        fn = call.get("function")
        if isinstance(fn, dict):  # OpenAI's shape: arguments as JSON text
            try:
                args = json.loads(fn.get("arguments") or "{}")
            except (TypeError, ValueError):
                raise RequestProblem(422, f"{at}.function.arguments must be a JSON object") from None
            call = {"name": fn.get("name"), "args": args, "id": call.get("id")}
        if not isinstance(call.get("name"), str) or not call["name"]:
            raise RequestProblem(422, f"{at}.name must be a non-empty string")
        if not isinstance(call.get("args"), dict):
            raise RequestProblem(422, f"{at}.args must be an object (the call's arguments)")
        if call.get("id") is not None and not isinstance(call["id"], str):
            raise RequestProblem(422, f"{at}.id must be a string")
        out.append({"name": call["name"], "args": call["args"], "id": call.get("id"), "type": "tool_call"})
    return out


def typed_messages(messages: Any, where: str = "messages") -> list[dict[str, Any]]:
    """Every message of ``messages`` in the typed form (see :func:`typed_message`)."""
    if not isinstance(messages, list) or not messages:
        raise RequestProblem(422, f"'{where}' must be a non-empty list")
    return [typed_message(m, f"{where}[{i}]") for i, m in enumerate(messages)]


ORACLE_NEEDS_GOLD_SERVED = (
    "this server runs the oracle policy, which plans and answers from a question's dataset annotations: "
    "send metadata with golden_answers (and supporting_titles), pick one of the example questions on /ui, "
    "or start the server with a real model (parallelsearch serve --policy openai:MODEL@URL or chat:PROVIDER:MODEL)"
)
