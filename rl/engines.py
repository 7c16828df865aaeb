"""Engine stand-ins with vLLM's ``generate(token_ids, sampling_params)`` shape, for CPU tests and debugging.

OpenRLHF hands the agent executor a vLLM engine whose ``generate`` returns a
``RequestOutput``. These classes return objects of the same shape (``outputs[0]``
with ``token_ids``, ``text``, ``finish_reason``, ``logprobs`` as a list of
``{token_id: Logprob}``) so the executor runs unchanged where vLLM cannot:

- :class:`TransformersEngine`: a real Hugging Face causal LM generating in-process;
- :class:`ScriptedEngine`: replays given turn texts (an honest stand-in for a model).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Logprob:
    logprob: float
    rank: int | None = None
    decoded_token: str | None = None


@dataclass
class CompletionOutput:
    index: int
    text: str
    token_ids: list[int]
    finish_reason: str | None
    logprobs: list[dict[int, Logprob]] | None = None
    stop_reason: str | None = None


@dataclass
class RequestOutput:
    request_id: str
    prompt_token_ids: list[int]
    outputs: list[CompletionOutput] = field(default_factory=list)
    finished: bool = True


def _cut_at_stop(text: str, stops: Sequence[str]) -> tuple[str, str | None]:
    best: tuple[int, str] | None = None
    for s in stops:
        i = text.find(s)
        if i != -1 and (best is None or i + len(s) < best[0]):
            best = (i + len(s), s)
    return (text, None) if best is None else (text[: best[0]], best[1])


def _stops(params: Any) -> list[str]:
    stop = getattr(params, "stop", None) or []
    return [stop] if isinstance(stop, str) else list(stop)


class ScriptedEngine:
    """Replays turn texts: the i-th call for a prompt returns ``turns[i]`` (last one repeated).

    Turns are matched to episodes by the prompt's leading tokens, so one engine can serve
    concurrent episodes. Text is cut at the first stop string (kept) and at ``max_tokens``
    tokens, as vLLM would; logprobs are a fixed -0.5 per token when requested.
    """

    def __init__(self, tokenizer: Any, turns: Sequence[str], prefix_tokens: int = 64):
        if not turns:
            raise ValueError("ScriptedEngine needs at least one turn")
        self.tokenizer = tokenizer
        self.turns = list(turns)
        self.prefix_tokens = prefix_tokens
        self.calls: dict[tuple[int, ...], int] = {}
        self.requests: list[list[int]] = []
        self.outputs: list[list[int]] = []  # generated token ids, in call order

    async def generate(
        self, token_ids: list[int], sampling_params: Any, multi_modal_data: Any = None
    ) -> RequestOutput:
        self.requests.append(list(token_ids))
        key = tuple(token_ids[: self.prefix_tokens])
        i = self.calls.get(key, 0)
        self.calls[key] = i + 1
        text, stop = _cut_at_stop(self.turns[min(i, len(self.turns) - 1)], _stops(sampling_params))
        ids = self.tokenizer(text, add_special_tokens=False)["input_ids"]
        finish = "stop" if stop else "length"
        cap = getattr(sampling_params, "max_tokens", None)
        if cap is not None and len(ids) > cap:
            ids, finish = ids[:cap], "length"
            text = self.tokenizer.decode(ids)
        lps = None
        if getattr(sampling_params, "logprobs", None) is not None:
            lps = [{t: Logprob(-0.5)} for t in ids]
        out = CompletionOutput(0, text, list(ids), finish, lps, stop)
        self.outputs.append(list(ids))
        return RequestOutput(f"scripted-{len(self.requests)}", list(token_ids), [out])


class TransformersEngine:
    """A Hugging Face causal LM behind vLLM's ``generate`` shape (one request at a time, in a thread).

    Honours ``max_tokens``, ``stop`` (generation ends at a stop string, which is kept, as
    with ``include_stop_str_in_output``), ``temperature``/``top_p`` and ``logprobs``.
    """

    def __init__(self, model: Any, tokenizer: Any):
        self.model = model.eval()
        self.tokenizer = tokenizer
        self._lock = threading.Lock()
        self.requests = 0
        self.outputs: list[list[int]] = []  # generated token ids, in call order

    def _run(self, token_ids: list[int], params: Any) -> RequestOutput:
        import torch

        stops = _stops(params)
        max_tokens = getattr(params, "max_tokens", None) or 16
        temperature = float(getattr(params, "temperature", 0.0) or 0.0)
        kwargs: dict[str, Any] = dict(
            max_new_tokens=max_tokens,
            do_sample=temperature > 0,
            output_scores=True,
            return_dict_in_generate=True,
            pad_token_id=self.tokenizer.pad_token_id
            if self.tokenizer.pad_token_id is not None
            else self.tokenizer.eos_token_id,
        )
        if stops:
            kwargs.update(stop_strings=stops, tokenizer=self.tokenizer)
        if temperature > 0:
            kwargs.update(temperature=temperature, top_p=float(getattr(params, "top_p", 1.0) or 1.0))
        input_ids = torch.tensor([token_ids], device=self.model.device)
        with self._lock, torch.no_grad():
            out = self.model.generate(input_ids, attention_mask=torch.ones_like(input_ids), **kwargs)
        new = out.sequences[0, input_ids.shape[1] :].tolist()
        text = self.tokenizer.decode(new, skip_special_tokens=True)
        cut, stop = _cut_at_stop(text, stops)
        if stop:
            finish = "stop"
        elif len(new) >= max_tokens:
            finish = "length"
        else:
            finish = "stop"  # end of sequence
        lps = None
        if getattr(params, "logprobs", None) is not None:
            lps = [
                {tok: Logprob(float(torch.log_softmax(s[0].float(), dim=-1)[tok]))}
                for s, tok in zip(out.scores, new, strict=False)
            ]
        self.requests += 1
        self.outputs.append(list(new))
        return RequestOutput(
            f"hf-{self.requests}", list(token_ids), [CompletionOutput(0, cut, new, finish, lps, stop)]
        )

    async def generate(
        self, token_ids: list[int], sampling_params: Any, multi_modal_data: Any = None
    ) -> RequestOutput:
        return await asyncio.to_thread(self._run, list(token_ids), sampling_params)
