"""Spec strings (:data:`SPEC_HELP`) -> policies, and how a builder's model string reads:
one of these specs, or ``init_chat_model``'s (:func:`model_string_reading`)."""

from __future__ import annotations

import difflib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from parallelsearch.agents.policies.chat import ChatModelPolicy
from parallelsearch.agents.policies.external import ExternalPolicy
from parallelsearch.agents.policies.hf import HFPolicy
from parallelsearch.agents.policies.openai_compat import OpenAICompletionsPolicy
from parallelsearch.agents.policies.scripted import OraclePolicy, ScriptedPolicy
from parallelsearch.agents.policies.vllm_engine import VLLMPolicy

#: where ``openai:MODEL`` goes when neither the spec nor the configuration names a URL
DEFAULT_OPENAI_BASE_URL = "http://127.0.0.1:8000/v1"


@dataclass(frozen=True)
class PolicyOptions:
    """What a spec's build may use beyond its value: the configured server, key, CA bundle and
    timeout of an OpenAI-compatible backend, a ``chat:`` model's server, and the decoding options."""

    spec: str
    base_url: str | None = None
    api_key: str | None = None
    ca_bundle: str | None = None
    timeout_s: float | None = None
    chat_base_url: str | None = None
    constrained: bool = False
    think_chars: int = 600
    engine_args: dict[str, Any] | None = None


@dataclass(frozen=True)
class PolicyKind:
    """One spec kind (the part before the first ':'): its forms in the help, the form a builder's
    model string may take, whether a value must follow the ':', whether it can decode constrained
    (None: no model decodes, the flag does not apply), and how it builds from the value."""

    build: Callable[[str, PolicyOptions], Any]
    help: tuple[str, ...]
    form: str
    needs_value: bool = True
    constrained: bool | None = False


def _oracle(value: str, opts: PolicyOptions) -> Any:
    if value not in ("", "dag"):
        raise ValueError(f"policy spec {opts.spec!r}: the oracle takes 'oracle' or 'oracle:dag'; {SPEC_HELP}")
    return OraclePolicy(dag=value == "dag")


def _openai(value: str, opts: PolicyOptions) -> Any:
    model, _, url = value.partition("@")
    if not model:
        raise ValueError(f"policy spec {opts.spec!r} names no model; {SPEC_HELP}")
    extra: dict[str, Any] = {"timeout_s": opts.timeout_s} if opts.timeout_s is not None else {}
    if opts.ca_bundle is not None:
        extra["ca_bundle"] = opts.ca_bundle
    url = url or opts.base_url or DEFAULT_OPENAI_BASE_URL
    return OpenAICompletionsPolicy(
        model, url, api_key=opts.api_key, constrained=opts.constrained, think_chars=opts.think_chars, **extra
    )


def _hf(value: str, opts: PolicyOptions) -> Any:
    return HFPolicy(value)


def _vllm(value: str, opts: PolicyOptions) -> Any:
    return VLLMPolicy(
        value, constrained=opts.constrained, think_chars=opts.think_chars, **(opts.engine_args or {})
    )


def _chat(value: str, opts: PolicyOptions) -> Any:
    return ChatModelPolicy(value, **_chat_server(value, opts.chat_base_url, opts.api_key))


#: every policy kind a spec can name, one row each: the help, the forms, the constrained check and
#: the build are all read from here (a new backend is its module and one row)
POLICY_KINDS: dict[str, PolicyKind] = {
    "oracle": PolicyKind(
        _oracle,
        ("oracle", "oracle:dag (the oracle planning a question's hops as one search)"),
        "oracle",
        needs_value=False,
        constrained=None,
    ),
    "scripted": PolicyKind(
        lambda value, opts: ScriptedPolicy.from_file(value),
        ("scripted:FILE.json",),
        "scripted:FILE",
        constrained=None,
    ),
    "hf": PolicyKind(_hf, ("hf:PATH",), "hf:PATH"),
    "vllm": PolicyKind(_vllm, ("vllm:PATH",), "vllm:PATH", constrained=True),
    "openai": PolicyKind(_openai, ("openai:MODEL[@BASE_URL]",), "openai:MODEL@URL", constrained=True),
    "chat": PolicyKind(_chat, ("chat:PROVIDER:MODEL",), "chat:PROVIDER:MODEL"),
    "external": PolicyKind(
        lambda value, opts: ExternalPolicy(), ("external",), "external", needs_value=False, constrained=None
    ),
}

#: each kind's first form, then the others
SPEC_HELP = "policy spec: " + " | ".join(
    [kind.help[0] for kind in POLICY_KINDS.values()]
    + [form for kind in POLICY_KINDS.values() for form in kind.help[1:]]
)

#: the spec forms a model string of the front door may take (any other string is init_chat_model's)
SPEC_FORMS = ", ".join(repr(kind.form) for kind in POLICY_KINDS.values())


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
        if kind in POLICY_KINDS and (sep or not POLICY_KINDS[kind].needs_value):
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
    """The policy a spec string names (its row of :data:`POLICY_KINDS`); ``base_url``, ``api_key``,
    ``ca_bundle`` and ``timeout_s`` reach the OpenAI-compatible backend (a URL in the spec wins);
    ``chat_base_url`` is a ``chat:`` model's server (with ``api_key`` for an ``openai`` one). Entry
    points go through ``graphs.factory.make_policy``, which passes the configured ones."""
    if not isinstance(spec, str) or not spec.strip():
        raise ValueError(f"empty policy spec; {SPEC_HELP}")
    name, _, value = spec.strip().partition(":")
    kind = POLICY_KINDS.get(name)
    if kind is None:
        close = difflib.get_close_matches(name, POLICY_KINDS, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise ValueError(f"unknown policy {name!r}{hint}; {SPEC_HELP}")
    if kind.needs_value and not value:
        raise ValueError(f"policy spec {spec!r} needs a value after '{name}:'; {SPEC_HELP}")
    if constrained and kind.constrained is False:
        able = " or ".join(k.form for k in POLICY_KINDS.values() if k.constrained)
        raise ValueError(
            f"constrained decoding needs vLLM's structured outputs: use {able} against vllm serve, not {name}:"
        )
    options = PolicyOptions(
        spec, base_url, api_key, ca_bundle, timeout_s, chat_base_url, constrained, think_chars, engine_args
    )
    return kind.build(value, options)
