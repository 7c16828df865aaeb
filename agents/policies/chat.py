"""Any LangChain chat model as a policy (an instance, or an ``init_chat_model`` spec), for a text
protocol or a tool-calling one (docs/architecture.md, "The protocol")."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from parallelsearch.agents.policies.base import SYNC_RUN, TurnRequest, TurnResult, close_unfinished_tag
from parallelsearch.agents.protocol import SEARCH_TOOL_NAME, content_text, truncate_at_stop
from parallelsearch.stores.errors import UnavailableError


def to_messages(request: TurnRequest) -> list[Any]:
    """The transcript as chat messages: earlier turns as AI messages, the rest as human ones."""
    from langchain_core.messages import AIMessage, HumanMessage, SystemMessage

    segs = request.segments or [("prompt", request.transcript)]
    msgs: list[Any] = []
    for role, text in segs:
        if role == "system":
            msgs.append(SystemMessage(content=text.strip()))
        elif role == "policy":
            msgs.append(AIMessage(content=text))
        elif msgs and isinstance(msgs[-1], HumanMessage):
            msgs[-1] = HumanMessage(content=msgs[-1].content + text)
        else:
            msgs.append(HumanMessage(content=text))
    return msgs


def supports_tools(model: Any) -> bool:
    """Whether a chat model implements ``bind_tools`` (``BaseChatModel``'s own only raises)."""
    from langchain_core.language_models import BaseChatModel

    impl = getattr(type(model), "bind_tools", None)
    return impl is not None and impl is not BaseChatModel.bind_tools


async def _call(model: Any, messages: list[Any], **kwargs: Any) -> Any:
    """``model.ainvoke``; in a sync graph run the model's own sync ``invoke`` in a worker thread
    (see :data:`SYNC_RUN`: provider clients bind connections to the loop that opened them)."""
    if SYNC_RUN.get():
        return await asyncio.to_thread(model.invoke, messages, **kwargs)
    return await model.ainvoke(messages, **kwargs)


def unreadable_calls(error: Exception, turn: int) -> list[dict[str, Any]] | None:
    """A reply's calls whose arguments are JSON but not an object (``true``, ``"q"``), which
    LangChain's ``AIMessage`` refuses with a pydantic error before the graph sees the reply, as
    invalid tool calls (so the turn gets the corrective note); ``None`` for any other error."""
    from pydantic import ValidationError

    errs = error.errors() if isinstance(error, ValidationError) else []
    if not errs or any(tuple(e.get("loc", ()))[:1] != ("tool_calls",) for e in errs):
        return None
    out = []
    for i, e in enumerate(errs):
        args = json.dumps(e.get("input"), default=str)
        index = e["loc"][1] if len(e["loc"]) > 1 else i
        out.append(
            {
                "type": "invalid_tool_call",
                "name": SEARCH_TOOL_NAME,
                "args": args,
                "id": f"call_{turn}_{index}",
                "error": f"{args[:40]} is not an object",
            }
        )
    return out


#: how providers say a reply stopped at its token limit (OpenAI, vLLM: ``finish_reason``;
#: Anthropic: ``stop_reason``; Ollama: ``done_reason``); all are reported as ``length``
_CUT_REASONS = {"length", "max_tokens", "MAX_TOKENS"}


def finish_reason(msg: Any) -> str:
    """Why a chat model's reply ended, as vLLM and OpenAI say it (``stop`` or ``length``)."""
    meta = getattr(msg, "response_metadata", None) or {}
    for key in ("finish_reason", "stop_reason", "done_reason"):
        value = meta.get(key)
        if isinstance(value, str) and value:
            return "length" if value in _CUT_REASONS else value
    return "stop"


def _streams_usage(model: Any) -> Any:
    """A model this policy made from a spec, asked to report its tokens when it streams too
    (ChatOpenAI leaves that off for any server but OpenAI's own): a streamed reply's usage is
    what the OpenAI endpoint's usage chunk adds up."""
    fields = getattr(type(model), "model_fields", {})
    if "stream_usage" in fields and getattr(model, "stream_usage", False) is None:
        model.stream_usage = True
    return model


def strict_specs(tools: Any) -> list[Any]:
    """``tools`` with each OpenAI function spec marked ``strict`` (its object schemas closed):
    ``bind_tools(strict=True)`` passes a spec that is already a dict on unchanged, and OpenAI's
    structured output refuses a function tool that is not strict."""
    from langchain_core.utils.function_calling import convert_to_openai_tool

    out = []
    for t in tools:
        fn = t.get("function") if isinstance(t, dict) and t.get("type") == "function" else None
        out.append(
            convert_to_openai_tool(fn, strict=True) if isinstance(fn, dict) and "strict" not in fn else t
        )
    return out


class ChatModelPolicy:
    """A LangChain chat model as a policy. A request that names ``tools`` (a chat protocol) gets a
    tool-calling reply from the model bound to those tools; any other gets text up to the
    request's stop strings. The messages are the request's, else its transcript's segments."""

    def __init__(self, model: Any, **init_kwargs: Any):
        if isinstance(model, str):
            try:
                from langchain.chat_models import init_chat_model  # type: ignore[import-not-found]  # langchain is an optional extra
            except ImportError as e:
                raise UnavailableError(
                    f"chat model spec {model!r} needs the 'langchain' package and the provider's package "
                    "(e.g. pip install langchain langchain-openai); or pass a chat model instance"
                ) from e

            self.name = f"chat:{model}"
            model = _streams_usage(init_chat_model(model, **init_kwargs))
        else:
            self.name = f"chat:{type(model).__name__}"
        self.model = model
        self.calls_tools = supports_tools(model)
        self._bound: dict[Any, Any] = {}  # the model bound to each set of tools, made once

    async def agenerate(self, request: TurnRequest) -> TurnResult:
        if not request.tools:  # a text protocol: text up to the stop strings
            messages = request.messages if request.messages is not None else to_messages(request)
            msg = await _call(self.model, messages, stop=list(request.stop))
            text = truncate_at_stop(content_text(msg.content), request.stop)
            result = TurnResult(
                close_unfinished_tag(text, request.stop), finish_reason="stop", labels=("chat",), message=msg
            )
        else:
            msg = await self._tool_message(request)
            result = TurnResult(
                text=content_text(msg.content),
                finish_reason=finish_reason(msg),
                labels=("chat", "tools"),
                message=msg,
                tool_calls=list(getattr(msg, "tool_calls", None) or []),
                invalid_tool_calls=list(getattr(msg, "invalid_tool_calls", None) or []),
            )
        usage = getattr(msg, "usage_metadata", None) or {}
        result.prompt_tokens, result.completion_tokens = usage.get("input_tokens"), usage.get("output_tokens")
        return result

    def _with_tools(self, tools: tuple[dict[str, Any], ...], options: dict[str, Any] | None = None) -> Any:
        if not tools:
            return self.model
        if not self.calls_tools:
            raise ValueError(
                f"{self.name} has no bind_tools, and the graph's protocol calls tools (use protocol='tags')"
            )
        # a protocol's tools (and a graph's binding options) are constants: no need to serialise them per turn
        key = (id(tools), id(options)) if options else id(tools)
        if key not in self._bound:
            given = strict_specs(tools) if (options or {}).get("strict") else list(tools)
            self._bound[key] = self.model.bind_tools(given, **(options or {}))
        return self._bound[key]

    async def _tool_message(self, request: TurnRequest) -> Any:
        messages = request.messages if request.messages is not None else to_messages(request)
        try:
            return await _call(self._with_tools(request.tools, request.bind_kwargs), messages)
        except Exception as e:
            broken = unreadable_calls(e, request.turn_index)
            if broken is None:
                raise
            from langchain_core.messages import AIMessage

            return AIMessage(content="", invalid_tool_calls=broken)
