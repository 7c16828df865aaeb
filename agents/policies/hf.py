"""Hugging Face transformers in-process policy (CPU or GPU), any causal LM path or instance."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from parallelsearch.agents.policies.base import TurnRequest, TurnResult
from parallelsearch.agents.protocol import truncate_at_stop


class HFPolicy:
    """One turn with ``model.generate`` (stop strings kept), in a worker thread under a lock, so
    the event loop and the searchers on it keep running."""

    name = "hf"

    def __init__(
        self, model: Any, tokenizer: Any | None = None, *, device: str | None = None, dtype: str = "auto"
    ):
        if isinstance(model, str):
            from transformers import AutoModelForCausalLM, AutoTokenizer

            from parallelsearch.agents.policies.models import resolve_model

            self.name = f"hf:{model}"
            model = resolve_model(model)  # a packaged name or a GGUF file: its converted folder
            tokenizer = tokenizer or AutoTokenizer.from_pretrained(model)
            model = AutoModelForCausalLM.from_pretrained(model, dtype=dtype)
            if device:
                model = model.to(device)
        if tokenizer is None:
            raise ValueError("HFPolicy needs a tokenizer when given a model instance")
        self.model = model.eval()
        self.tokenizer = tokenizer
        self._lock = threading.Lock()

    def _generate(self, request: TurnRequest) -> TurnResult:
        import torch

        ids = request.token_ids
        if ids is None:
            ids = self.tokenizer(request.transcript, add_special_tokens=False)["input_ids"]
        input_ids = torch.tensor([ids], device=self.model.device)
        sample = request.temperature > 0
        pad = self.tokenizer.pad_token_id
        kwargs: dict[str, Any] = dict(
            max_new_tokens=request.max_tokens,
            do_sample=sample,
            output_scores=request.logprobs,
            return_dict_in_generate=True,
            pad_token_id=pad if pad is not None else self.tokenizer.eos_token_id,
        )
        if request.stop:
            kwargs.update(stop_strings=list(request.stop), tokenizer=self.tokenizer)
        if sample:
            kwargs.update(temperature=request.temperature, top_p=request.top_p)
        with self._lock, torch.no_grad():
            out = self.model.generate(input_ids, attention_mask=torch.ones_like(input_ids), **kwargs)
        new = out.sequences[0, input_ids.shape[1] :].tolist()
        logprobs = None
        if request.logprobs and out.scores:
            logprobs = [
                float(torch.log_softmax(s[0].float(), dim=-1)[tok])
                for s, tok in zip(out.scores, new, strict=False)
            ]
        text = self.tokenizer.decode(new, skip_special_tokens=True)
        cut = truncate_at_stop(text, request.stop)
        # a stop string, or EOS before the token cap
        stopped = cut != text or any(text.endswith(s) for s in request.stop) or len(new) < request.max_tokens
        finish = "stop" if stopped else "length"
        return TurnResult(
            text=cut,
            token_ids=new,
            logprobs=logprobs,
            finish_reason=finish,
            prompt_tokens=len(ids),
            completion_tokens=len(new),
            labels=("hf",),
        )

    async def agenerate(self, request: TurnRequest) -> TurnResult:
        return await asyncio.to_thread(self._generate, request)
