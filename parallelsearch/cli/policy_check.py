"""The policy's model checked before a command starts anything (indexing, a server, a run): a
``chat:`` model must be constructible (its provider's key is set) and a model server the
settings name must answer. A mistake there is one line naming the setting, not a traceback from
deep inside the first question after minutes of set-up."""

from __future__ import annotations

import httpx

from parallelsearch.agents.policies.config import PolicyConfig
from parallelsearch.stores.errors import ParallelSearchError, UnavailableError
from parallelsearch.stores.redact import redact_url, redact_urls

#: how long the model server has to accept a connection and answer anything at all
PROBE_TIMEOUT_S = 5.0
_SPEC_SETTING = "--policy / PARALLELSEARCH_POLICY"


def check_policy(cfg: PolicyConfig) -> None:
    """Raise :class:`UnavailableError` (one line) when the policy or answer policy cannot run."""
    for spec in dict.fromkeys(s for s in (cfg.policy, cfg.answer_policy) if s):
        kind, _, rest = spec.strip().partition(":")
        if kind == "chat" and rest:
            _check_chat_model(spec, cfg)
        url, setting = _server_of(kind, rest, cfg)
        if url:
            _probe(url, setting, cfg.openai_ca_bundle)


def _server_of(kind: str, rest: str, cfg: PolicyConfig) -> tuple[str | None, str]:
    """The model server a spec talks to and the setting that names it (none for in-process models,
    or a ``chat:`` model at its provider's own default service)."""
    if kind == "openai" and rest:
        url = rest.partition("@")[2]
        if url:
            return url, _SPEC_SETTING
        return cfg.openai_base_url, "openai_base_url / PARALLELSEARCH_OPENAI_BASE_URL"
    if kind == "chat" and cfg.policy_base_url:
        return cfg.policy_base_url, "--policy-base-url / PARALLELSEARCH_POLICY_BASE_URL"
    return None, ""


def _check_chat_model(spec: str, cfg: PolicyConfig) -> None:
    """Build the chat model once: a provider client without its key raises here, offline."""
    from parallelsearch.graphs.factory import make_policy

    try:
        make_policy(cfg.model_copy(update={"policy": spec, "answer_policy": None}))
    except ParallelSearchError:
        raise
    except Exception as e:  # the provider's own error type (openai.OpenAIError, ...): one line instead
        provider = spec.split(":")[1]
        raise UnavailableError(
            f"policy {spec!r}: its chat model cannot be made ({_first_line(e)}); {_key_hint(provider)}"
        ) from e


def _key_hint(provider: str) -> str:
    if provider == "openai":
        return (
            "set OPENAI_API_KEY, or PARALLELSEARCH_OPENAI_API_KEY with --policy-base-url for your own server "
            "(any text when it has no key)"
        )
    return f"set the {provider} provider's key (e.g. {provider.upper().replace('-', '_')}_API_KEY)"


def _probe(url: str, setting: str, ca_bundle: str | None) -> None:
    """Any HTTP answer will do (even a 401 or 404): only a server that cannot be reached is refused."""
    try:
        httpx.get(url.rstrip("/") + "/models", timeout=PROBE_TIMEOUT_S, verify=ca_bundle or True)
    except httpx.ConnectError as e:
        reason = "connection refused" if "refused" in str(e).lower() else _first_line(e)
        raise UnavailableError(f"policy server {redact_url(url)} ({setting}) is unreachable: {reason}") from e
    except httpx.TimeoutException as e:
        raise UnavailableError(
            f"policy server {redact_url(url)} ({setting}) did not answer in {PROBE_TIMEOUT_S:g} s"
        ) from e
    except (httpx.HTTPError, httpx.InvalidURL) as e:
        raise UnavailableError(f"policy server {redact_url(url)} ({setting}): {_first_line(e)}") from e


def _first_line(e: BaseException) -> str:
    text = redact_urls(str(e)).strip().splitlines()
    return f"{type(e).__name__}: {text[0]}" if text else type(e).__name__
