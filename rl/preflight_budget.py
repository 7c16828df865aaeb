"""The pre-flight checks that need the policy's tokenizer (``train --check``): its chat template
(OpenRLHF applies it to raw prompts; the official reward needs ChatML's assistant marker), and the
context budget: ``max_len`` against a full episode's tokens. Each raises a ValueError naming the
cause and the fix.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

#: what ``official`` reward mode looks for in an episode (the official code's assistant marker)
ASSISTANT_MARKER = "<|im_start|>assistant"
#: characters per token when no tokenizer is at hand (English prose with a BPE vocabulary)
CHARS_PER_TOKEN = 4
#: tokens of one passage when the retriever was not probed (wiki-18's 100-word passages, titled)
DEFAULT_PASSAGE_TOKENS = 160


def local_tokenizer(model: str) -> tuple[Any, str]:
    """The model's tokenizer if this machine has it (a folder, or the Hugging Face cache; nothing is
    downloaded), else None, with a line saying which."""
    try:
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(model, local_files_only=True), f"the tokenizer of {model}"
    except Exception as e:  # noqa: BLE001 - any failure means: not available here
        return None, f"the tokenizer of {model} is not on this machine ({type(e).__name__})"


def count_tokens(text: str, tokenizer: Any) -> int:
    """Tokens of ``text``: the tokenizer's count, else an estimate at :data:`CHARS_PER_TOKEN`."""
    if tokenizer is None:
        return math.ceil(len(text) / CHARS_PER_TOKEN)
    return len(tokenizer(text, add_special_tokens=False)["input_ids"])


def check_chat_template(tokenizer: Any, model: str, prompt: str | None, mode: str) -> str:
    """OpenRLHF can chat-template ``prompt`` with the tokenizer, and in ``official`` mode the result
    holds ChatML's assistant marker (else a perfect episode scores 1.70, not 1.80)."""
    if not getattr(tokenizer, "chat_template", None):
        raise ValueError(
            f"apply_chat_template=true but the tokenizer of {model} has no chat template: OpenRLHF's "
            "PromptDataset would fail on the cluster; use an instruct model's tokenizer, or set "
            "apply_chat_template=false with agent.reward.mode=paper-strict"
        )
    rendered = tokenizer.apply_chat_template(
        [{"role": "user", "content": prompt or "Question: q?\n"}], tokenize=False, add_generation_prompt=True
    )
    if mode == "official" and ASSISTANT_MARKER not in rendered:
        raise ValueError(
            f"reward mode official scores what follows '{ASSISTANT_MARKER}' (ChatML, Qwen's template), "
            f"but the chat template of {model} renders {rendered[-40:]!r} before the answer: every "
            "episode would fail the format (a perfect one scores 1.70); set agent.reward.mode=paper-strict"
        )
    return f"chat template of {model}: renders the prompts" + (
        f" with '{ASSISTANT_MARKER}'" if mode == "official" else ""
    )


@dataclass(frozen=True)
class EpisodeBudget:
    """A full episode's tokens: the prompt, ``max_turns`` searching turns each answered by one
    observation of ``top_k`` passages (per sub-query), and the final answer turn."""

    prompt: int
    turn: int
    passage: int
    max_turns: int
    top_k: int

    @property
    def observation(self) -> int:
        return self.top_k * self.passage

    @property
    def need(self) -> int:
        return self.prompt + self.max_turns * (self.turn + self.observation) + self.turn

    def spelled(self) -> str:
        return (
            f"prompt {self.prompt} + max_turns {self.max_turns} x (turn {self.turn} + top_k {self.top_k} x "
            f"passage {self.passage}) + final turn {self.turn} = {self.need}"
        )


def passage_tokens(passages: Sequence[Any], tokenizer: Any) -> int:
    """The mean of ``passages`` as the observation renders them (``Doc i(Title: t) text``), in tokens:
    the probe's answer stands for a typical observation."""
    lines = [f"Doc {i}(Title: {p.title}) {p.text}\n" for i, p in enumerate(passages, 1)]
    if not lines:
        return DEFAULT_PASSAGE_TOKENS
    return math.ceil(sum(count_tokens(line, tokenizer) for line in lines) / len(lines))


def check_budget(max_len: int, budget: EpisodeBudget, how: str) -> str:
    """``max_len`` holds a full episode (else observations are cut inside ``<information>``)."""
    if max_len < budget.need:
        raise ValueError(
            f"max_len {max_len} < the {budget.need} tokens a full episode takes ({budget.spelled()}; {how}): "
            "observations would be cut inside <information> and the episode end unanswered; set "
            f"max_len >= {budget.need}, or fewer agent.graph_config.max_turns / top_k"
        )
    room = (max_len - budget.need) // max(budget.max_turns * budget.observation, 1) + 1
    queries = "sub-query" if room == 1 else "sub-queries"
    return f"max_len {max_len} >= {budget.spelled()} ({how}; room for about {room} {queries} per search)"
