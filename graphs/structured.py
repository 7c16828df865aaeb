"""Structured output of the answer, as ``create_agent``'s ``response_format=`` gives it: with a
``ToolStrategy`` the model answers by calling an output tool offered beside the search tools
(a tool call is then required each turn, as ``create_agent`` binds it), with a ``ProviderStrategy``
the provider shapes the plain answer; a bare schema chooses between them as ``create_agent`` does.
The parsed answer is the state's ``structured_response``; searching is unchanged."""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from typing import Any

from parallelsearch.agents.protocol import Action, SearchProtocol, TurnRequest, TurnResult

#: what the other calls of a turn that answered with the output tool are told
NOT_SEARCHED_ANSWERED = "Not searched: the structured answer ended the turn."


@dataclass(frozen=True)
class StructuredTurn:
    """A turn read under ``response_format``: the action it is (``None``: as the protocol reads
    it), the parsed answer, and the tool messages answering its output calls."""

    action: Action | None
    response: Any = None
    replies: tuple[Any, ...] = ()

    def state(self) -> dict[str, Any]:
        """What the turn writes to the state: its structured answer, when it gave one."""
        return {"structured_response": self.response} if self.response is not None else {}


@dataclass(frozen=True)
class StructuredAnswer:
    """One graph's resolved ``response_format``: the strategy, the tools and binding options each
    planner turn is sent, and the output tools' bindings by name (a ``ToolStrategy``)."""

    strategy: Any
    tools: tuple[dict[str, Any], ...]
    bind_kwargs: dict[str, Any] = field(default_factory=dict)
    bindings: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def of(cls, response_format: Any, model: Any, protocol: SearchProtocol) -> StructuredAnswer | None:
        """``response_format`` (a ``ToolStrategy``, ``ProviderStrategy``, ``AutoStrategy`` or a
        schema type) for ``model`` under ``protocol``; ``None`` when none is given."""
        if response_format is None:
            return None
        if not protocol.chat or model is None:
            raise ValueError(
                "response_format= needs a chat model speaking the tools protocol (protocol='tools'); "
                f"this graph's planner speaks {protocol.name!r}"
            )
        from langchain.agents.structured_output import AutoStrategy, ProviderStrategy, ToolStrategy

        fmt = response_format
        if not isinstance(fmt, ToolStrategy | ProviderStrategy | AutoStrategy):
            fmt = AutoStrategy(schema=fmt)
        if isinstance(fmt, AutoStrategy):
            from langchain.agents.factory import _supports_provider_strategy  # create_agent's own choice

            supported = _supports_provider_strategy(model, tools=list(protocol.tools))
            fmt = ProviderStrategy(schema=fmt.schema) if supported else ToolStrategy(schema=fmt.schema)
        if isinstance(fmt, ProviderStrategy):
            return cls(fmt, protocol.tools, _provider_kwargs(fmt, model))
        return _tool_strategy(fmt, protocol)

    @property
    def output_tools(self) -> tuple[dict[str, Any], ...]:
        """The output tools (a ``ToolStrategy``'s), in the OpenAI function format."""
        return tuple(t for t in self.tools if t["function"]["name"] in self.bindings)

    def request(self, request: TurnRequest) -> TurnRequest:
        """``request`` with the output tools and the binding options."""
        return replace(request, tools=self.tools, bind_kwargs=self.bind_kwargs)

    def read(self, res: TurnResult) -> StructuredTurn | None:
        """The turn's structured answer (or the error replies a ``ToolStrategy`` retries with);
        ``None`` for a turn that does not answer (a search). A refused answer raises LangChain's
        ``StructuredOutputError`` as ``create_agent`` does."""
        calls = [c for c in res.tool_calls if c.get("name") in self.bindings]
        if not self.bindings:
            if res.tool_calls or res.message is None:
                return None
            return StructuredTurn(None, _provider_parse(self.strategy, res.message))
        return _tool_answer(self, res, calls) if calls else None


def _provider_kwargs(fmt: Any, model: Any) -> dict[str, Any]:
    """What ``create_agent`` binds a provider strategy with (``strict`` for OpenAI's chat API)."""
    from langchain.agents.factory import _is_openai_compatible_model

    kwargs = dict(fmt.to_model_kwargs())
    if _is_openai_compatible_model(model) and not getattr(model, "use_responses_api", False):
        kwargs["strict"] = True
    return kwargs


def _tool_strategy(fmt: Any, protocol: SearchProtocol) -> StructuredAnswer:
    """A ``ToolStrategy``: its output tools beside the search tools, a tool call required."""
    from langchain.agents.structured_output import OutputToolBinding
    from langchain_core.utils.function_calling import convert_to_openai_tool

    bindings = {}
    for spec in fmt.schema_specs:
        binding = OutputToolBinding.from_schema_spec(spec)
        bindings[binding.tool.name] = binding
    if set(bindings) & {t["function"]["name"] for t in protocol.tools}:
        raise ValueError(f"response_format's output tool {sorted(bindings)} has a searcher's name")
    specs = tuple(convert_to_openai_tool(b.tool) for b in bindings.values())
    return StructuredAnswer(fmt, (*protocol.tools, *specs), {"tool_choice": "any"}, bindings)


def _provider_parse(strategy: Any, message: Any) -> Any:
    from langchain.agents.structured_output import ProviderStrategyBinding, StructuredOutputValidationError

    try:
        return ProviderStrategyBinding.from_schema_spec(strategy.schema_spec).parse(message)
    except Exception as exc:  # noqa: BLE001 - create_agent wraps whatever the parse raised
        name = getattr(strategy.schema_spec.schema, "__name__", "response_format")
        raise StructuredOutputValidationError(name, exc, message) from exc


def _tool_answer(
    structured: StructuredAnswer, res: TurnResult, calls: list[dict[str, Any]]
) -> StructuredTurn:
    """A turn that called an output tool: its answer (every other call told it was not searched),
    or, when the call is refused and the strategy's ``handle_errors`` retries, an invalid turn
    whose calls are answered with the error."""
    from langchain.agents.factory import _handle_structured_output_error
    from langchain.agents.structured_output import (
        MultipleStructuredOutputsError,
        StructuredOutputValidationError,
    )
    from langchain_core.messages import ToolMessage

    strategy = structured.strategy
    try:
        if len(calls) > 1:
            raise MultipleStructuredOutputsError([c["name"] for c in calls], res.message)
        try:
            response = structured.bindings[calls[0]["name"]].parse(calls[0]["args"])
        except Exception as exc:  # noqa: BLE001 - create_agent wraps whatever the parse raised
            raise StructuredOutputValidationError(calls[0]["name"], exc, res.message) from exc
    except Exception as exc:  # noqa: BLE001 - create_agent's handle_errors decides
        retry, text = _handle_structured_output_error(exc, strategy)
        if not retry:
            raise
        replies = tuple(
            ToolMessage(
                content=text if c in calls else NOT_SEARCHED_ANSWERED,
                tool_call_id=c["id"],
                name=c["name"],
                status="error",
            )
            for c in res.tool_calls
        )
        return StructuredTurn(Action("invalid", reason=f"structured output refused: {exc}"), None, replies)
    said = strategy.tool_message_content or f"Returning structured response: {response}"
    replies = tuple(
        ToolMessage(content=said, tool_call_id=c["id"], name=c["name"])
        if c is calls[0]
        else ToolMessage(content=NOT_SEARCHED_ANSWERED, tool_call_id=c["id"], name=c["name"], status="error")
        for c in res.tool_calls
    )
    return StructuredTurn(Action("answer", answer=_answer_text(calls[0]["args"])), response, replies)


def _answer_text(args: Any) -> str:
    """The structured answer as the episode's ``answer`` text (its JSON)."""
    return json.dumps(args, ensure_ascii=False, default=str)
