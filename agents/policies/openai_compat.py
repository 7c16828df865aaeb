"""OpenAI-compatible ``/v1/completions`` (``vllm serve`` or any server of that API): token ids in
and out with vLLM's extensions; every request has a timeout and a bounded retry.
"""

from __future__ import annotations

import asyncio
from typing import Any

import httpx

from parallelsearch.agents.policies.base import TurnRequest, TurnResult, close_unfinished_tag, request_regex
from parallelsearch.stores.errors import UnavailableError, UpstreamError
from parallelsearch.stores.http.tls import tls_context
from parallelsearch.stores.redact import redact_url, split_credentials


def transport_reason(e: BaseException) -> str:
    """What went wrong on the wire, in words: httpx says "All connection attempts failed" and
    keeps the socket error (``ConnectionRefusedError``, a DNS failure) in its cause chain."""
    seen: BaseException | None = e
    for _ in range(8):
        if seen is None:
            break
        if isinstance(seen, ConnectionRefusedError):
            return f"connection refused ({e})"
        if isinstance(seen, OSError) and seen.errno is not None:
            return f"{seen.strerror or seen} ({e})"
        seen = seen.__cause__ or seen.__context__
    return f"{type(e).__name__}: {e}" if str(e) else type(e).__name__


class OpenAICompletionsPolicy:
    def __init__(
        self,
        model: str,
        base_url: str = "http://127.0.0.1:8000/v1",
        *,
        api_key: str | None = None,
        timeout_s: float = 120.0,
        retries: int = 2,
        vllm_extensions: bool = True,
        constrained: bool = False,
        think_chars: int = 600,
        ca_bundle: str | None = None,
    ):
        self.model = model
        # a password in the URL goes in the Authorization header; names and messages show it masked
        self.name = f"openai:{model}@{redact_url(base_url)}"
        self.base_url, self._auth = split_credentials(base_url.rstrip("/"))
        self.api_key = api_key  # from the caller (settings: PARALLELSEARCH_OPENAI_API_KEY / OPENAI_API_KEY)
        self.timeout_s = timeout_s
        self.retries = retries
        self.vllm_extensions = vllm_extensions
        if constrained and not vllm_extensions:
            raise ValueError(
                "constrained decoding needs a vLLM server (structured_outputs); enable vllm_extensions"
            )
        self.constrained = constrained
        self.think_chars = think_chars
        self._tls = tls_context(ca_bundle)  # read now: a bad bundle is an error at start-up, naming it

    def _payload(self, r: TurnRequest) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self.model,
            "prompt": r.token_ids if (r.token_ids is not None and self.vllm_extensions) else r.transcript,
            "max_tokens": r.max_tokens,
            "temperature": r.temperature,
            "top_p": r.top_p,
            "stop": list(r.stop),
        }
        if r.logprobs:
            body["logprobs"] = 1
        if self.vllm_extensions:
            body.update(include_stop_str_in_output=True, return_token_ids=True)
        if self.constrained:  # vLLM's structured outputs (vLLM 0.32 ignores the older "guided_regex")
            body["structured_outputs"] = {"regex": request_regex(r, self.think_chars)}
        return body

    async def agenerate(self, request: TurnRequest) -> TurnResult:
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        last: Exception | None = None
        async with httpx.AsyncClient(timeout=self.timeout_s, verify=self._tls, auth=self._auth) as client:
            for attempt in range(self.retries + 1):
                try:
                    resp = await client.post(
                        f"{self.base_url}/completions", json=self._payload(request), headers=headers
                    )
                    if resp.status_code < 500 or attempt == self.retries:
                        break
                    last = RuntimeError(f"{self.base_url} answered {resp.status_code}")
                except (httpx.TransportError, httpx.TimeoutException) as e:
                    last = e
                    if attempt == self.retries:
                        raise UnavailableError(
                            f"{self.base_url}/completions failed after {attempt + 1} attempts: "
                            f"{transport_reason(e)}"
                        ) from e
                await asyncio.sleep(0.2 * 2**attempt)
        if resp.status_code >= 400:
            raise UpstreamError(
                f"{self.base_url}/completions answered {resp.status_code}: {resp.text[:300]} ({last})"
            )
        body = resp.json()
        choice = body["choices"][0]
        text = choice.get("text") or ""
        stop_reason = choice.get("stop_reason")
        if isinstance(stop_reason, str) and stop_reason in request.stop and not text.endswith(stop_reason):
            text += stop_reason  # servers without include_stop_str_in_output drop it
        text = close_unfinished_tag(text, request.stop) if choice.get("finish_reason") == "stop" else text
        lp = choice.get("logprobs") or {}
        usage = body.get("usage") or {}
        return TurnResult(
            text=text,
            token_ids=choice.get("token_ids"),
            logprobs=lp.get("token_logprobs") if isinstance(lp, dict) else None,
            finish_reason=choice.get("finish_reason"),
            prompt_tokens=usage.get("prompt_tokens"),
            completion_tokens=usage.get("completion_tokens"),
            labels=("openai",) + (("constrained",) if self.constrained else ()),
        )
