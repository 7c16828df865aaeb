"""What a builder accepts as its planner, turned into a policy once, at build time (the order
of the checks: docs/architecture.md, "Planners"; a chat model is recognised by type first, as
its ``agenerate`` would pass for a policy's)."""

from __future__ import annotations

from typing import Any, Literal, get_args

from parallelsearch.agents.policies.base import Policy
from parallelsearch.agents.policies.chat import ChatModelPolicy, supports_tools
from parallelsearch.agents.policies.spec import POLICY_KINDS, SPEC_HELP, policy_from_spec
from parallelsearch.agents.protocol import Protocol
from parallelsearch.stores.errors import check_choice

ProtocolChoice = Literal["auto", Protocol]
PROTOCOLS: tuple[str, ...] = get_args(ProtocolChoice)

ACCEPTED = (
    "a LangChain chat model (BaseChatModel), an init_chat_model string ('provider:model', e.g. "
    f"'anthropic:claude-sonnet-4-5'), a {SPEC_HELP}, or a policy (an object with async "
    "agenerate(TurnRequest) -> TurnResult)"
)


def is_chat_model(obj: object) -> bool:
    from langchain_core.language_models import BaseChatModel

    return isinstance(obj, BaseChatModel)


def _speaking(pol: ChatModelPolicy, protocol: ProtocolChoice) -> ChatModelPolicy:
    """``pol`` with the protocol ``protocol`` asks for (``auto``: tools when it can bind them)."""
    want = "tools" if protocol == "tools" or (protocol == "auto" and supports_tools(pol.model)) else "tags"
    if pol.protocol == want:
        return pol
    out = ChatModelPolicy(pol.model, protocol=want)
    out.name = pol.name
    return out


def as_policy(obj: Any, protocol: ProtocolChoice = "tags", **spec_kwargs: Any) -> Any:
    """``obj`` as a policy speaking ``protocol`` (``auto``: tools for a chat model with
    ``bind_tools``), or a TypeError naming what was passed; ``spec_kwargs`` reach :func:`policy_from_spec`."""
    check_choice(protocol, PROTOCOLS, "protocol")
    if isinstance(obj, str):  # a spec of ours, else an init_chat_model string
        ours = obj.strip().partition(":")[0] in POLICY_KINDS or ":" not in obj
        obj = policy_from_spec(obj, **spec_kwargs) if ours else ChatModelPolicy(obj)
    if isinstance(obj, ChatModelPolicy):
        pol = _speaking(obj, protocol)
    elif is_chat_model(obj):
        pol = _speaking(ChatModelPolicy(obj), protocol)
    elif isinstance(obj, Policy) or callable(getattr(obj, "agenerate", None)):
        pol = obj
    else:
        raise TypeError(f"cannot use {type(obj).__name__} {str(obj)[:80]!r} as the planner; pass {ACCEPTED}")
    if protocol == "tools" and policy_protocol(pol) != "tools":
        raise ValueError(
            f"protocol='tools' needs a LangChain chat model with bind_tools; {getattr(pol, 'name', pol)!r} "
            "writes text (use protocol='tags' or 'auto')"
        )
    return pol


def policy_protocol(policy: Any) -> Protocol:
    """The protocol a policy speaks: ``tools`` for a chat model bound to the search tool, or a
    policy that writes the tools protocol's text form (the external policy of training)."""
    if isinstance(policy, ChatModelPolicy) or getattr(policy, "tool_text", False):
        return "tools" if getattr(policy, "protocol", "tags") == "tools" else "tags"
    return "tags"
