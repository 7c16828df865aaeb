"""What a builder accepts as its planner, turned into a policy once, at build time, and the
protocol it will speak (the order of the checks: docs/architecture.md, "Planners"; a chat model
is recognised by type first, as its ``agenerate`` would pass for a policy's, and so is a
pre-bound one, refused)."""

from __future__ import annotations

from typing import Any

from parallelsearch.agents.policies.base import Policy, calls_tools
from parallelsearch.agents.policies.chat import ChatModelPolicy
from parallelsearch.agents.policies.spec import SPEC_FORMS, model_string_reading, policy_from_spec
from parallelsearch.agents.protocol import PROTOCOLS, SearchProtocol, get_protocol
from parallelsearch.stores.errors import check_choice

ACCEPTED = (
    "a LangChain chat model (BaseChatModel, not pre-bound), an init_chat_model string (e.g. "
    f"'openai:gpt-4o-mini', 'anthropic:claude-sonnet-4-5'), one of this project's specs ({SPEC_FORMS}), "
    "or a policy (an object with async agenerate(TurnRequest) -> TurnResult)"
)


def protocol_choices() -> tuple[str, ...]:
    """What ``protocol=`` may name: ``auto`` or a registered protocol."""
    return ("auto", *PROTOCOLS)


def is_chat_model(obj: object) -> bool:
    from langchain_core.language_models import BaseChatModel

    return isinstance(obj, BaseChatModel)


def _bound_chat_model(obj: Any) -> Any:
    """The chat model inside a ``RunnableBinding`` (``model.bind_tools([...])``, ``model.bind(...)``,
    ``with_config``, ``with_retry``) or ``with_fallbacks``, however deep; None for anything else."""
    from langchain_core.runnables import RunnableWithFallbacks
    from langchain_core.runnables.base import RunnableBindingBase

    while isinstance(obj, RunnableBindingBase | RunnableWithFallbacks):
        obj = obj.bound if isinstance(obj, RunnableBindingBase) else obj.runnable
        if is_chat_model(obj):
            return obj
    return None


def _tool_name(tool: Any) -> str:
    """A bound tool's name: OpenAI's ``{"function": {"name"}}`` form, a tool object, or a function."""
    if isinstance(tool, dict):
        return str(tool.get("function", tool).get("name", "?"))
    return str(getattr(tool, "name", None) or getattr(tool, "__name__", type(tool).__name__))


def _prebound_message(obj: Any) -> str:
    """Why a pre-bound chat model is refused: the graph binds the ``search`` tool and passes each
    turn's stop strings itself, so what was bound before would be lost or fight the protocol."""
    model = _bound_chat_model(obj)
    tools = [_tool_name(t) for t in (getattr(obj, "kwargs", None) or {}).get("tools") or []]
    bound = f"bound to the tools {tools}" if tools else f"inside a {type(obj).__name__}"
    return (
        f"the planner is a {type(model).__name__} {bound}; pass the chat model itself: the graph binds its "
        "own 'search' tool to it (each call is one sub-query, the calls of one message one parallel round) "
        "and sets each turn's stop strings, so what is bound or wrapped around it beforehand would be "
        "lost. Set sampling on the model (e.g. ChatOpenAI(temperature=0)); give search tools as the "
        "graph's searchers"
    )


def as_policy(obj: Any, **spec_kwargs: Any) -> Any:
    """``obj`` as a policy, or a TypeError naming what was passed; ``spec_kwargs`` reach
    :func:`policy_from_spec`."""
    if isinstance(obj, str):  # a spec of ours, else an init_chat_model string
        ours = model_string_reading(obj, base_url=spec_kwargs.get("base_url")) == "spec"
        return policy_from_spec(obj, **spec_kwargs) if ours else ChatModelPolicy(obj.strip())
    if isinstance(obj, ChatModelPolicy):
        return obj
    if is_chat_model(obj):
        return ChatModelPolicy(obj)
    if _bound_chat_model(obj) is not None:
        raise TypeError(_prebound_message(obj))
    if isinstance(obj, Policy) or callable(getattr(obj, "agenerate", None)):
        return obj
    raise TypeError(f"cannot use {type(obj).__name__} {str(obj)[:80]!r} as the planner; pass {ACCEPTED}")


def resolve_protocol(choice: str | SearchProtocol, policy: Any) -> SearchProtocol:
    """The protocol ``policy`` will speak: ``choice`` (a name or a protocol object), where
    ``auto`` means tools for a policy that calls tools and tags otherwise. A protocol with tools
    needs such a policy."""
    if isinstance(choice, SearchProtocol):
        protocol = choice
    else:
        name = check_choice(choice, protocol_choices(), "protocol")
        if name == "auto":
            name = "tools" if calls_tools(policy) else "tags"
        protocol = get_protocol(name)
    if protocol.tools and not calls_tools(policy):
        raise ValueError(
            f"protocol {protocol.name!r} needs a LangChain chat model with bind_tools; "
            f"{getattr(policy, 'name', policy)!r} writes text (use protocol='tags', or 'tool_text' for the "
            "tool calls written as text)"
        )
    return protocol
