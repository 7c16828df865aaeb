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
#: tokens per word of English prose with a BPE vocabulary (a word cap on observations, in tokens)
TOKENS_PER_WORD = 1.4


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
    #: tokens of the widest search's observation (max_subqueries sub-queries), and how it was counted
    wide: int = 0
    wide_said: str = ""

    @property
    def need_wide(self) -> int:
        """One turn that searches as wide as allowed, then the answer."""
        return self.prompt + self.turn + self.wide + self.turn

    #: tokens an observation is cut to before the next turn (``agent.max_observation_tokens``)
    cap: int | None = None

    @property
    def observation(self) -> int:
        full = self.top_k * self.passage
        return min(full, self.cap) if self.cap else full

    @property
    def need(self) -> int:
        return self.prompt + self.max_turns * (self.turn + self.observation) + self.turn

    def spelled(self) -> str:
        observation = f"top_k {self.top_k} x passage {self.passage}"
        if self.observation < self.top_k * self.passage:
            observation = f"max_observation_tokens {self.cap}"
        return (
            f"prompt {self.prompt} + max_turns {self.max_turns} x (turn {self.turn} + {observation}) "
            f"+ final turn {self.turn} = {self.need}"
        )


def passage_tokens(passages: Sequence[Any], tokenizer: Any) -> int:
    """The mean of ``passages`` as the observation renders them (``Doc i(Title: t) text``), in tokens:
    the probe's answer stands for a typical observation."""
    lines = [f"Doc {i}(Title: {p.title}) {p.text}\n" for i, p in enumerate(passages, 1)]
    if not lines:
        return DEFAULT_PASSAGE_TOKENS
    return math.ceil(sum(count_tokens(line, tokenizer) for line in lines) / len(lines))


def widest_observation(graph_config: Any, passage: int, cap: int | None = None) -> tuple[int, str]:
    """Tokens of the observation of a search of ``max_subqueries`` sub-queries: top_k passages
    each (fewer under ``passage_budget``), within ``max_observation_words`` and the observation
    cap ``cap`` (tokens); and the sum spelled out."""
    k = graph_config.max_subqueries
    each = graph_config.search_top_k(k)
    tokens = k * each * passage
    said = f"max_subqueries {k} x {each} passage(s) x {passage}"
    words = graph_config.max_observation_words
    if words and math.ceil(words * TOKENS_PER_WORD) < tokens:
        tokens = math.ceil(words * TOKENS_PER_WORD)
        said = f"max_observation_words {words} x {TOKENS_PER_WORD}"
    if cap and cap < tokens:
        tokens, said = cap, "max_observation_tokens"
    return tokens, f"{said} = {tokens}"


def check_budget(max_len: int, budget: EpisodeBudget, how: str) -> str:
    """``max_len`` holds a full episode, and an episode whose one search is as wide as allowed
    (a decomposed search returns top_k passages per sub-query); else observations are cut inside
    ``<information>``."""
    if max_len < budget.need:
        raise ValueError(
            f"max_len {max_len} < the {budget.need} tokens a full episode takes ({budget.spelled()}; {how}): "
            "observations would be cut inside <information> and the episode end unanswered; set "
            f"max_len >= {budget.need}, or fewer agent.graph_config.max_turns / top_k"
        )
    if max_len < budget.need_wide:
        raise ValueError(
            f"max_len {max_len} < the {budget.need_wide} tokens of an episode with one search of every "
            f"sub-query allowed (prompt {budget.prompt} + turn {budget.turn} + observation "
            f"{budget.wide_said} + final turn {budget.turn}; {how}): its observation would be cut inside "
            f"<information>; set max_len >= {budget.need_wide}, or fewer agent.graph_config.max_subqueries, "
            "a passage_budget or max_observation_words"
        )
    return f"max_len {max_len} >= {budget.spelled()} ({how})"


def whole_subqueries(graph_config: Any, passage: int, limit: int) -> int:
    """The most sub-queries one search may hold whose passages all fit in ``limit`` tokens."""
    fit = 0
    for k in range(1, graph_config.max_subqueries + 1):
        if k * graph_config.search_top_k(k) * passage > limit:
            break
        fit = k
    return fit


def check_cap(cap: int | None, passage: int, top_k: int, how: str) -> None:
    """An observation cap below one passage cuts every observation inside its first passage."""
    if cap is not None and cap < passage:
        raise ValueError(
            f"agent.max_observation_tokens {cap} < one passage ({passage} tokens; {how}): every observation is "
            f"cut inside its first passage; set agent.max_observation_tokens >= {2 * top_k * passage} (two "
            "sub-queries' top_k passages), or unset it"
        )


def subquery_room(max_len: int, budget: EpisodeBudget, graph_config: Any) -> tuple[str, bool]:
    """How many sub-queries of one search keep every passage (within the observation cap, the word cap
    and what ``max_len`` leaves after the prompt and two turns), and whether that is under two (a
    warning: a split search would read its second sub-query's passages cut)."""
    limits = {
        "max_len": (
            max_len - budget.prompt - 2 * budget.turn,
            f"max_len {max_len} after the prompt and two turns",
        )
    }
    if budget.cap:
        limits["agent.max_observation_tokens"] = (budget.cap, f"max_observation_tokens {budget.cap}")
    words = graph_config.max_observation_words
    if words:
        limits["agent.graph_config.max_observation_words"] = (
            math.ceil(words * TOKENS_PER_WORD),
            f"max_observation_words {words} x {TOKENS_PER_WORD}",
        )
    setting, (limit, by) = min(limits.items(), key=lambda kv: kv[1][0])
    fit = whole_subqueries(graph_config, budget.passage, limit)
    each = f"top_k {graph_config.top_k} x passage {budget.passage} = {graph_config.top_k * budget.passage}"
    queries = "sub-query's" if fit == 1 else "sub-queries'"
    held = f"{fit} {queries} passages whole ({by}: {limit} tokens; {each} a sub-query)"
    if fit >= 2:
        return f"budget: one search holds {held}", False
    need = 2 * graph_config.search_top_k(2) * budget.passage
    raise_to = f"{setting} >= {need}" if setting != "agent.graph_config.max_observation_words" else setting
    return (
        f"budget: one search holds only {held}: a split search's second sub-query is cut, so decomposing "
        f"reads fewer passages than searching once; set agent.graph_config.top_k <= "
        f"{max(1, limit // (2 * budget.passage))}, or raise {raise_to}"
    ), True
