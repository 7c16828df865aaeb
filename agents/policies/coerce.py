"""What a builder accepts as its planner, turned into a policy once, at build time, and the
protocol it will speak (the order of the checks: docs/architecture.md, "Planners"; a chat model
is recognised by type first, as its ``agenerate`` would pass for a policy's)."""

from __future__ import annotations

from typing import Any

from parallelsearch.agents.policies.base import Policy, calls_tools
from parallelsearch.agents.policies.chat import ChatModelPolicy
from parallelsearch.agents.policies.spec import POLICY_KINDS, SPEC_HELP, policy_from_spec
from parallelsearch.agents.protocol import PROTOCOLS, SearchProtocol, get_protocol
from parallelsearch.stores.errors import check_choice

ACCEPTED = (
    "a LangChain chat model (BaseChatModel), an init_chat_model string ('provider:model', e.g. "
    f"'anthropic:claude-sonnet-4-5'), a {SPEC_HELP}, or a policy (an object with async "
    "agenerate(TurnRequest) -> TurnResult)"
)


def protocol_choices() -> tuple[str, ...]:
    """What ``protocol=`` may name: ``auto`` or a registered protocol."""
    return ("auto", *PROTOCOLS)


def is_chat_model(obj: object) -> bool:
    from langchain_core.language_models import BaseChatModel

    return isinstance(obj, BaseChatModel)


def as_policy(obj: Any, **spec_kwargs: Any) -> Any:
    """``obj`` as a policy, or a TypeError naming what was passed; ``spec_kwargs`` reach
    :func:`policy_from_spec`."""
    if isinstance(obj, str):  # a spec of ours, else an init_chat_model string
        ours = obj.strip().partition(":")[0] in POLICY_KINDS or ":" not in obj
        return policy_from_spec(obj, **spec_kwargs) if ours else ChatModelPolicy(obj)
    if isinstance(obj, ChatModelPolicy):
        return obj
    if is_chat_model(obj):
        return ChatModelPolicy(obj)
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
