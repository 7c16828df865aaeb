"""One training episode, driven the one way the executor and rollouts both drive it: the pending
turn request goes to a generator (an engine or a policy), the turn's tokens go into the ledger,
the decoded turn goes to the environment, the observation's tokens follow, until the graph ends
the episode or the context is full; then the record is scored once (docs/architecture.md,
"A training episode").
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from parallelsearch.agents.protocol import TurnRequest
from parallelsearch.graphs.record import Episode
from parallelsearch.rl.env import EnvGraph, SearchEnv
from parallelsearch.rl.rewards import RewardBreakdown

log = logging.getLogger(__name__)


def decode_tokens(tokenizer: Any, tokens: list[int]) -> str:
    """Token ids -> text, exactly: special tokens kept, no clean-up of spaces.

    The episode's one decoding. Everything the environment, the reward and the next turn see is
    decoded this way from the ids the policy is trained on, so text and tokens never drift apart
    (for byte-level BPE tokenizers such as Qwen's, decoding is exactly additive).
    """
    return tokenizer.decode(tokens, skip_special_tokens=False, clean_up_tokenization_spaces=False)


@dataclass
class Generated:
    """One generated turn: its text, and token-in/token-out its ids and their log-probs."""

    text: str
    token_ids: list[int] | None = None
    logprobs: list[float] | None = None
    finish_reason: str | None = None
    info: dict[str, Any] = field(default_factory=dict)  # what a rollout record keeps of the turn


class TokenLedger:
    """An episode's token ids, the spans the policy generated (``ranges``; the action mask),
    their log-probs (None elsewhere), and whether the context overflowed. A turn without ids
    (a text policy) is tokenised from its text and counted in ``retokenized``."""

    def __init__(
        self,
        tokenizer: Any,
        prompt: str,
        max_length: int | None = None,
        turn_cap: int | None = None,
        observation_cap: int | None = None,
    ):
        self.tokenizer = tokenizer
        self.max_length = max_length
        self.observation_cap = observation_cap
        self.observations_cut = 0  # observations cut at observation_cap
        self.context_full = False  # a turn or an observation was cut at max_length: the episode stops
        self.prompt_cut = False  # the prompt was cut to leave room for a turn
        self.truncated = False  # OpenRLHF's meaning: the last turn stopped on length (its token cap)
        ids = self.encode(prompt)
        if max_length is not None:
            # room for one whole turn after the prompt, as OpenRLHF's executors leave (a cap of the
            # whole context cannot be honoured: then one token)
            room = max_length - turn_cap if turn_cap is not None and turn_cap < max_length else max_length - 1
            if len(ids) > room:
                log.warning(
                    "prompt of %d tokens leaves no room for a turn of %s in max_length %d; keeping its last %d",
                    len(ids), turn_cap, max_length, room,
                )  # fmt: skip
                ids, self.prompt_cut = ids[-room:], True
        self.ids: list[int] = ids
        self.prompt_len = len(ids)
        self.ranges: list[tuple[int, int]] = []
        self.logprobs: list[float | None] = [None] * len(ids)
        self.retokenized = 0

    @property
    def overflowed(self) -> bool:
        """The context ran out: the prompt, a turn or an observation was cut."""
        return self.context_full or self.prompt_cut

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"]) if text else []

    def room(self) -> int | None:
        """Tokens left before ``max_length`` (None: no limit)."""
        return None if self.max_length is None else self.max_length - len(self.ids)

    def add_turn(self, turn: Generated) -> str:
        """Append a generated turn; returns its text as decoded from the ids (what the env gets)."""
        ids = list(turn.token_ids) if turn.token_ids is not None else None
        if ids is None:
            ids = self.encode(turn.text)
            self.retokenized += 1
        lps = turn.logprobs if turn.logprobs is not None and len(turn.logprobs) == len(ids) else None
        self.ranges.append((len(self.ids), len(self.ids) + len(ids)))
        self.ids += ids
        self.logprobs += list(lps) if lps is not None else [None] * len(ids)
        self.truncated = turn.finish_reason == "length"
        room = self.room()
        if room is not None and room <= 0 and self.truncated:
            self.context_full = True
        return decode_tokens(self.tokenizer, ids)

    def add_observation(self, text: str) -> None:
        """Append the environment's text, cut at ``observation_cap`` tokens (the official code cuts
        an observation's ids the same way) and where the context ends."""
        ids = self.encode(text)
        if self.observation_cap is not None and len(ids) > self.observation_cap:
            log.warning("observation of %d tokens cut to %d", len(ids), self.observation_cap)
            ids, self.observations_cut = ids[: self.observation_cap], self.observations_cut + 1
        room = self.room()
        if room is not None and len(ids) > room:
            ids, self.context_full = ids[: max(room, 0)], True
        self.ids += ids
        self.logprobs += [None] * len(ids)

    def mask(self) -> list[int]:
        out = [0] * len(self.ids)
        for start, end in self.ranges:
            out[start:end] = [1] * (end - start)
        return out

    def text(self) -> str:
        return decode_tokens(self.tokenizer, self.ids)


#: what generates a turn: the pending request and the ledger (None when tokens are not kept)
TurnGenerator = Callable[[TurnRequest, "TokenLedger | None"], Awaitable[Generated]]


@dataclass
class EpisodeRun:
    """A driven episode: its record, the graph's final state, the ledger, the per-turn log, the
    decoded text the reward read, and the reward."""

    episode: Episode
    state: dict[str, Any]
    prompt: str
    text: str
    turns: list[dict[str, Any]]
    ledger: TokenLedger | None = None
    reward: RewardBreakdown | None = None

    @property
    def cut(self) -> bool:
        """The episode was cut before the graph ended it: the context ran out, or its last turn
        stopped at its token cap (without a ledger: the policy's last turn finished on length)."""
        if self.ledger is not None:
            return self.ledger.overflowed or self.ledger.truncated
        return bool(self.turns) and self.turns[-1].get("finish_reason") == "length"


async def _turns(env: SearchEnv, generate: TurnGenerator, ledger: TokenLedger | None) -> list[dict[str, Any]]:
    """Generate, append and step until the graph ends the episode or the context is full."""
    turns: list[dict[str, Any]] = []
    while not env.done:
        room = ledger.room() if ledger is not None else None
        if env.turn is None or (room is not None and room <= 0):
            if ledger is not None:
                ledger.context_full = True
            break
        gen = await generate(env.turn, ledger)
        if ledger is None:
            text, step = gen.text, await env.step(gen.text)
        else:  # the graph gets the turn's ids and context too: it counts tokens as when serving
            start = len(ledger.ids)
            text = ledger.add_turn(gen)
            step = await env.step(text, ledger.ids[start:], prompt_tokens=start)
            ledger.add_observation(step.observation or "")
        turns.append({"text": text, "observation": step.observation, **gen.info})
        if ledger is not None and ledger.context_full:
            break
    return turns


async def run_episode(
    env_graph: EnvGraph,
    question: str,
    label: Any,
    generate: TurnGenerator,
    *,
    metadata: dict[str, Any] | None = None,
    ledger_for: Callable[[str], TokenLedger | None] = lambda prompt: None,
    chat: Callable[[str], str] | None = None,
) -> EpisodeRun:
    """One episode of ``generate`` in ``env_graph``, scored once. ``ledger_for(prompt)`` gives
    the ledger (the executor's starts from OpenRLHF's prompt, a rollout's from the env's prompt
    as the job's chat template frames it); without a ledger ``chat`` frames the prompt of the
    text the reward reads."""
    env = env_graph.new_episode()
    try:
        prompt = await env.reset(question, label, metadata)
        ledger = ledger_for(prompt)
        turns = await _turns(env, generate, ledger)
        state = env.last_output if env.done else await env.values()
    finally:
        env.close()
    episode = Episode.from_state(state)
    if ledger is not None:
        text = ledger.text()
    else:
        text = (chat(prompt) if chat else prompt) + env.transcript[len(prompt) :]
    reward = env_graph.score(episode, label, text) if label is not None else None
    return EpisodeRun(episode, state, prompt, text, turns, ledger, reward)
