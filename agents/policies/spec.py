"""CLI spec strings (:data:`SPEC_HELP`) -> policies."""

from __future__ import annotations

import difflib
from typing import Any, Literal, get_args

from parallelsearch.agents.policies.chat import ChatModelPolicy
from parallelsearch.agents.policies.external import ExternalPolicy
from parallelsearch.agents.policies.hf import HFPolicy
from parallelsearch.agents.policies.openai_compat import OpenAICompletionsPolicy
from parallelsearch.agents.policies.scripted import OraclePolicy, ScriptedPolicy
from parallelsearch.agents.policies.vllm_engine import VLLMPolicy

#: where ``openai:MODEL`` goes when neither the spec nor the configuration names a URL
DEFAULT_OPENAI_BASE_URL = "http://127.0.0.1:8000/v1"

#: the spec kinds, the part before the first ':'
PolicyKind = Literal["oracle", "scripted", "hf", "vllm", "openai", "chat", "external"]
POLICY_KINDS: tuple[str, ...] = get_args(PolicyKind)

SPEC_HELP = (
    "policy spec: oracle | scripted:FILE.json | hf:PATH | vllm:PATH | openai:MODEL[@BASE_URL] | "
    "chat:PROVIDER:MODEL | external | oracle:dag (the oracle planning a question's hops as one search)"
)


def policy_from_spec(
    spec: str,
    *,
    base_url: str | None = None,
    api_key: str | None = None,
    timeout_s: float | None = None,
    constrained: bool = False,
    think_chars: int = 600,
    engine_args: dict[str, Any] | None = None,
) -> Any:
    """The policy a spec string names; ``base_url``, ``api_key`` and ``timeout_s`` reach the
    OpenAI-compatible backend (a URL in the spec wins). Entry points go through
    ``graphs.factory.make_policy``, which passes the configured ones."""
    if not isinstance(spec, str) or not spec.strip():
        raise ValueError(f"empty policy spec; {SPEC_HELP}")
    kind, _, rest = spec.strip().partition(":")
    if kind not in POLICY_KINDS:
        close = difflib.get_close_matches(kind, POLICY_KINDS, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise ValueError(f"unknown policy {kind!r}{hint}; {SPEC_HELP}")
    if kind == "oracle":
        if rest not in ("", "dag"):
            raise ValueError(f"policy spec {spec!r}: the oracle takes 'oracle' or 'oracle:dag'; {SPEC_HELP}")
        return OraclePolicy(dag=rest == "dag")
    if kind == "external":
        return ExternalPolicy()
    if not rest:
        raise ValueError(f"policy spec {spec!r} needs a value after '{kind}:'; {SPEC_HELP}")
    if kind == "scripted":
        return ScriptedPolicy.from_file(rest)
    if constrained and kind not in ("vllm", "openai"):
        raise ValueError(
            f"constrained decoding needs vLLM's structured outputs: use vllm:PATH or openai:MODEL@URL against "
            f"vllm serve, not {kind}:"
        )
    if kind == "hf":
        return HFPolicy(rest)
    if kind == "vllm":
        return VLLMPolicy(rest, constrained=constrained, think_chars=think_chars, **(engine_args or {}))
    if kind == "openai":
        model, _, url = rest.partition("@")
        if not model:
            raise ValueError(f"policy spec {spec!r} names no model; {SPEC_HELP}")
        extra: dict[str, Any] = {"timeout_s": timeout_s} if timeout_s is not None else {}
        url = url or base_url or DEFAULT_OPENAI_BASE_URL
        return OpenAICompletionsPolicy(
            model, url, api_key=api_key, constrained=constrained, think_chars=think_chars, **extra
        )
    if kind == "chat":
        return ChatModelPolicy(rest)
    raise AssertionError(f"policy kind {kind!r} is in POLICY_KINDS but has no branch")
