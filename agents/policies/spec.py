"""CLI spec strings -> policies.

``openai:MODEL@http://127.0.0.1:8000/v1``, ``hf:PATH``, ``vllm:PATH``,
``chat:PROVIDER:MODEL`` (LangChain ``init_chat_model``), ``scripted:FILE.json``,
``oracle``, ``external``.
"""

from __future__ import annotations

from typing import Any

SPEC_HELP = (
    "policy spec: oracle | scripted:FILE.json | hf:PATH | vllm:PATH | openai:MODEL[@BASE_URL] | "
    "chat:PROVIDER:MODEL | external"
)


def policy_from_spec(spec: str, **kwargs: Any) -> Any:
    from parallelsearch.agents.policies import (
        ChatModelPolicy,
        ExternalPolicy,
        HFPolicy,
        OpenAICompletionsPolicy,
        OraclePolicy,
        ScriptedPolicy,
        VLLMPolicy,
    )

    if not isinstance(spec, str) or not spec.strip():
        raise ValueError(f"empty policy spec; {SPEC_HELP}")
    kind, _, rest = spec.strip().partition(":")
    if kind == "oracle":
        return OraclePolicy()
    if kind == "external":
        return ExternalPolicy()
    if not rest:
        raise ValueError(f"policy spec {spec!r} needs a value after '{kind}:'; {SPEC_HELP}")
    if kind == "scripted":
        return ScriptedPolicy.from_file(rest)
    if kind == "hf":
        return HFPolicy(rest)
    if kind == "vllm":
        return VLLMPolicy(rest)
    if kind == "openai":
        model, _, url = rest.partition("@")
        return OpenAICompletionsPolicy(
            model, url or kwargs.get("base_url") or "http://127.0.0.1:8000/v1", api_key=kwargs.get("api_key")
        )
    if kind == "chat":
        return ChatModelPolicy(rest)
    raise ValueError(f"unknown policy kind {kind!r}; {SPEC_HELP}")
