"""The learning smoke's starting point: the tiny model fitted on a teacher's episodes of both plans.

A random model of 0.16M parameters never writes a valid search without constrained decoding, so RL
from it has nothing to reinforce in minutes. The teacher is a scripted stand-in for the engine: it
answers the executor's ``generate`` calls with fixed turns, through the same ``execute`` OpenRLHF
calls, so its episodes hold real observations from the real retriever and the exact token layout of
training. For every training question it writes the two plans the paper contrasts, once each: both
supporting titles in one search (``A ## B``), and one title per search; then the gold answer. Fitted on
both with OpenRLHF's ``SFTLoss`` on the action tokens, the model decomposes a fifth to a quarter of the
time (measured), for any question; which plan earns more depends on the question (docs/training.md, "The
learning smoke").
"""

from __future__ import annotations

import asyncio
import json
import random
import types
from collections.abc import Callable, Sequence
from typing import Any

#: the teacher's reasoning before a search and before the answer (the same for both plans, so the plan
#: is decided where the search is written, not in the thinking)
THINK_SEARCH = "<think> I need to search </think>\n"
THINK_ANSWER = "<think> I can answer </think>\n"
PLANS = ("parallel", "single")
#: the end of a chat turn (the tiny tokenizer's EOS)
END_OF_TURN = "<|im_end|>"


def teacher_turns(question: dict[str, Any], plan: str, form: str = "tags") -> list[str]:
    """The teacher's turns for ``question`` under ``plan``: one search of its supporting titles (all of
    them, ``##``-separated, or the first only), then its first gold answer. ``form="tools"`` writes
    them as the chat agent's model does in gateway mode: one Hermes ``<tool_call>`` per title, then
    the answer as plain text, each turn ended by ``<|im_end|>``."""
    if plan not in PLANS:
        raise ValueError(f"plan {plan!r}: one of {', '.join(PLANS)}")
    meta = question.get("metadata") or {}
    titles = list(dict.fromkeys(meta.get("supporting_titles") or [])) or [question["question"]]
    searched = titles if plan == "parallel" else titles[:1]
    if form == "tools":
        calls = "\n".join(
            '<tool_call>\n{"name": "search", "arguments": ' + json.dumps({"query": t}) + "}\n</tool_call>"
            for t in searched
        )
        return [calls + END_OF_TURN, (question.get("golden_answers") or [""])[0] + END_OF_TURN]
    return [
        f"{THINK_SEARCH}<search> {' ## '.join(searched)} </search>",
        f"{THINK_ANSWER}<answer> {(question.get('golden_answers') or [''])[0]} </answer>",
    ]


class ScriptedEngine:
    """A stand-in for the rollout engine that answers each ``generate`` with the next scripted turn
    (its text's token ids, cut at the call's ``max_tokens``)."""

    def __init__(self, turns: Sequence[str], tokenizer: Any) -> None:
        self.turns = list(turns)
        self.tokenizer = tokenizer
        self.calls = 0

    async def generate(self, prompt_token_ids: list[int], sampling_params: Any) -> Any:
        text = self.turns[min(self.calls, len(self.turns) - 1)]
        self.calls += 1
        ids = list(self.tokenizer(text, add_special_tokens=False)["input_ids"])
        cap = getattr(sampling_params, "max_tokens", None)
        finish = "stop"
        if cap is not None and len(ids) > cap:
            ids, finish = ids[:cap], "length"
            text = self.tokenizer.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False)
        want = getattr(sampling_params, "logprobs", None) is not None
        out = types.SimpleNamespace(
            token_ids=ids, text=text, logprobs=[0.0] * len(ids) if want else None, finish_reason=finish
        )
        return types.SimpleNamespace(outputs=[out])


async def demonstrations(
    executor: Any,
    questions: Sequence[dict[str, Any]],
    records: Sequence[dict[str, Any]],
    params: Any,
    max_length: int,
    tokenizer: Any,
    concurrency: int = 8,
    form: str = "tags",
) -> list[dict[str, Any]]:
    """Both plans of every question, each one episode of ``executor.execute`` (OpenRLHF's call) with the
    teacher as the engine; ``records`` are the questions' prompt records."""
    sem = asyncio.Semaphore(concurrency)

    async def one(q: dict[str, Any], rec: dict[str, Any], plan: str) -> dict[str, Any]:
        async with sem:
            engine = ScriptedEngine(teacher_turns(q, plan, form), tokenizer)
            return await executor.execute(
                prompt=rec["prompt"],
                label=rec["label"],
                sampling_params=params,
                max_length=max_length,
                hf_tokenizer=tokenizer,
                llm_engine=engine,
                images=None,
            )

    jobs = [one(q, r, plan) for q, r in zip(questions, records, strict=True) for plan in PLANS]
    return list(await asyncio.gather(*jobs))


def fit(
    trainer: Any,
    demos: list[dict[str, Any]],
    *,
    steps: int,
    batch: int,
    lr: float,
    seed: int,
    progress: Callable[[int, float], None] | None = None,
) -> list[float]:
    """``steps`` AdamW steps of OpenRLHF's ``SFTLoss`` on the demonstrations' action tokens (the
    observations and the prompt carry no loss, as in its multi-turn SFT); the loss of each step.
    ``progress(step, loss)`` is called every 25 steps."""
    import torch
    from openrlhf.models import SFTLoss
    from openrlhf.trainer.ppo_utils.experience import Experience

    samples = trainer.samples(demos)
    trainable = [p for p in trainer.actor.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(trainable, lr=lr, weight_decay=0.0)
    loss_fn = SFTLoss()
    rng = random.Random(seed)
    torch.manual_seed(seed)  # nothing here draws from torch's generator today; a change that does repeats
    losses = []
    for _ in range(steps):
        chunk = rng.sample(samples, min(batch, len(samples)))
        b = Experience.concat_experiences(chunk, trainer.tokenizer.pad_token_id)
        loss = loss_fn(trainer.log_probs(b, grad=True), b.action_mask)
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(trainable, 1.0)
        opt.step()
        losses.append(float(loss.detach()))
        if progress is not None and len(losses) % 25 == 0:
            progress(len(losses), losses[-1])
    return losses
