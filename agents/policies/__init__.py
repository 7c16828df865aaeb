"""Policies: how a turn of text gets generated (one async protocol, many backends)."""

from typing import Any

from parallelsearch.agents.policies.base import Policy, TurnRequest, TurnResult
from parallelsearch.agents.policies.chat import ChatModelPolicy
from parallelsearch.agents.policies.coerce import as_policy
from parallelsearch.agents.policies.config import DEFAULT_POLICY, PolicyConfig
from parallelsearch.agents.policies.external import ExternalPolicy
from parallelsearch.agents.policies.hf import HFPolicy
from parallelsearch.agents.policies.openai_compat import OpenAICompletionsPolicy
from parallelsearch.agents.policies.scripted import OraclePolicy, ScriptedPolicy
from parallelsearch.agents.policies.spec import SPEC_HELP, policy_from_spec
from parallelsearch.agents.policies.vllm_engine import VLLMPolicy

__all__ = [
    "DEFAULT_POLICY",
    "SPEC_HELP",
    "ChatModelPolicy",
    "ExternalPolicy",
    "HFPolicy",
    "OpenAICompletionsPolicy",
    "OraclePolicy",
    "Policy",
    "PolicyConfig",
    "ScriptedPolicy",
    "TurnRequest",
    "TurnResult",
    "ScriptedToolChatModel",
    "VLLMPolicy",
    "as_policy",
    "policy_from_spec",
]


def __getattr__(name: str) -> Any:
    # the scripted chat model subclasses LangChain's BaseChatModel: imported when asked for
    if name == "ScriptedToolChatModel":
        from parallelsearch.agents.policies.scripted_chat import ScriptedToolChatModel

        return ScriptedToolChatModel
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
