"""Spec strings (:data:`SPEC_HELP`) -> policies, and how a builder's model string reads:
one of these specs, or ``init_chat_model``'s (:func:`model_string_reading`)."""

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


#: the spec forms a model string of the front door may take (any other string is init_chat_model's)
SPEC_FORMS = (
    "'openai:MODEL@URL', 'vllm:PATH', 'hf:PATH', 'oracle', 'scripted:FILE', 'chat:PROVIDER:MODEL', 'external'"
)


def _is_url(text: str) -> bool:
    return text.startswith(("http://", "https://"))


def model_string_reading(model: str, *, base_url: str | None = None) -> Literal["spec", "chat"]:
    """How a model string given to a builder reads: ``spec`` (one of :data:`SPEC_FORMS`, or close
    to one of its kinds, so the spec parser names the typo) or ``chat`` (``init_chat_model``'s, such
    as ``"openai:gpt-4o-mini"``). ``openai:MODEL`` is a spec only with a URL (in the string, or
    ``base_url``); a checkpoint-like MODEL (a ``/`` in it) without one reads both ways and is refused
    with both readings, as is an ``@`` that is followed by no URL."""
    text = model.strip()
    kind, sep, rest = text.partition(":")
    if kind != "openai":
        if kind in POLICY_KINDS and (sep or kind in ("oracle", "external")):
            return "spec"
        close = difflib.get_close_matches(kind, POLICY_KINDS, n=1, cutoff=0.8)
        return "spec" if close else "chat"
    name, at, url = rest.rpartition("@") if "@" in rest else (rest, "", "")
    if at and not _is_url(url):
        raise ValueError(
            f"model {model!r}: after '@' comes the base URL of an OpenAI-compatible completions server "
            f"(openai:MODEL@http://HOST:PORT/v1); for init_chat_model's ChatOpenAI leave the '@' out"
        )
    if at or base_url or not name:
        return "spec"
    if "/" in name:
        raise ValueError(
            f"model {model!r} reads two ways: (1) this project's spec, a completions endpoint (vllm serve) "
            f"serving the trained checkpoint {name!r} and speaking the tags protocol: write "
            f"'openai:{name}@{DEFAULT_OPENAI_BASE_URL}' with your server's URL; (2) init_chat_model({text!r}), a ChatOpenAI "
            f"chat model at OPENAI_BASE_URL (else api.openai.com) calling the search tool: write "
            f"'chat:{text}', or pass ChatOpenAI(model={name!r}, base_url=...)"
        )
    return "chat"


def _chat_server(model: str, base_url: str | None, api_key: str | None) -> dict[str, Any]:
    """``init_chat_model``'s keywords for a ``chat:`` policy's server: its base URL when one is
    configured, and the configured key with it when the model is OpenAI's kind (the key of the
    OpenAI-compatible server)."""
    if not base_url:
        return {}
    if not _is_url(base_url):
        raise ValueError(f"policy_base_url {base_url!r} must be an http:// or https:// URL")
    out: dict[str, Any] = {"base_url": base_url}
    if api_key and model.startswith("openai:"):
        out["api_key"] = api_key
    return out


def policy_from_spec(
    spec: str,
    *,
    base_url: str | None = None,
    api_key: str | None = None,
    ca_bundle: str | None = None,
    timeout_s: float | None = None,
    chat_base_url: str | None = None,
    constrained: bool = False,
    think_chars: int = 600,
    engine_args: dict[str, Any] | None = None,
) -> Any:
    """The policy a spec string names; ``base_url``, ``api_key``, ``ca_bundle`` and ``timeout_s`` reach the
    OpenAI-compatible backend (a URL in the spec wins); ``chat_base_url`` is a ``chat:`` model's
    server (with ``api_key`` for an ``openai`` one). Entry points go through
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
        if ca_bundle is not None:
            extra["ca_bundle"] = ca_bundle
        url = url or base_url or DEFAULT_OPENAI_BASE_URL
        return OpenAICompletionsPolicy(
            model, url, api_key=api_key, constrained=constrained, think_chars=think_chars, **extra
        )
    if kind == "chat":
        return ChatModelPolicy(rest, **_chat_server(rest, chat_base_url, api_key))
    raise AssertionError(f"policy kind {kind!r} is in POLICY_KINDS but has no branch")
