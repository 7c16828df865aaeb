"""One OpenRLHF episode over the graph environment: OpenRLHF's engine generates each turn of
the one episode loop (``parallelsearch.rl.episode``), whose ledger gives ``action_ranges`` that
are exactly the generated spans, so retrieved text never enters the loss. No OpenRLHF import
here: ``openrlhf_agent.py`` wraps it, and tests call it with engine stand-ins too.
"""

from __future__ import annotations

import abc
import copy
import dataclasses
import logging
import re
import time
from typing import Any

from parallelsearch.agents.protocol import TurnRequest, get_protocol
from parallelsearch.graphs.record import Episode
from parallelsearch.rl.data import SCORE_EM
from parallelsearch.rl.env import EnvGraph
from parallelsearch.rl.episode import (
    EpisodeRun,
    Generated,
    TokenLedger,
    TurnGenerator,
    run_episode,
)
from parallelsearch.rl.rewards import QUESTION_CLASSES, RewardBreakdown, parse_label, unshaped
from parallelsearch.rl.search_failures import SearchFailureGuard
from parallelsearch.stores.text import scrub_text

log = logging.getLogger(__name__)

_QUESTION_RE = re.compile(r"Question:\s*(.+?)\s*(?:\n|<\|im_end\|>|<\|eot_id\|>|$)", re.DOTALL)


def question_from(prompt: str, label: dict[str, Any]) -> str:
    """The question: the label's ``question`` field, else the prompt's ``Question:`` line."""
    q = label.get("question")
    if isinstance(q, str) and q.strip():
        return q
    matches = list(_QUESTION_RE.finditer(prompt))
    if not matches:
        raise ValueError(
            "cannot find the question: the label has no 'question' and the prompt no 'Question:' line"
        )
    return matches[-1].group(1)


def turn_params(params: Any, *, stop: tuple[str, ...], max_tokens: int, regex: str | None = None) -> Any:
    """A copy of the sampling params for one turn: stop strings kept in the output, a token cap,
    and with ``regex`` vLLM's structured outputs (constrained decoding)."""
    overrides: dict[str, Any] = {
        "stop": list(stop),
        "include_stop_str_in_output": True,
        "max_tokens": int(max_tokens),
    }
    if regex is not None:
        from parallelsearch.agents.policies.vllm_engine import structured_regex

        overrides["structured_outputs"] = structured_regex(regex)
    fields = getattr(type(params), "__struct_fields__", None)  # vLLM SamplingParams is a msgspec Struct
    if fields:
        values = {f: getattr(params, f) for f in fields if not f.startswith("_")}
        values.update(overrides)
        try:
            return type(params)(**values)
        except TypeError:
            pass
    if dataclasses.is_dataclass(params) and not isinstance(params, type):
        names = {f.name for f in dataclasses.fields(params)}
        return dataclasses.replace(params, **{k: v for k, v in overrides.items() if k in names})
    new = copy.deepcopy(params)
    for k, v in overrides.items():
        try:
            setattr(new, k, v)
        except AttributeError:
            pass
    return new


def sampled_logprobs(out: Any, ids: list[int]) -> list[float]:
    """The sampled tokens' log-probs. A token missing from its entry raises, as OpenRLHF's own
    executor does (``logprob[token]``): another token's value would bias the importance ratio."""
    lps = getattr(out, "logprobs", None)
    if lps is None:
        raise ValueError("logprobs were requested but the engine returned none")
    vals: list[float] = []
    for i, (tok, entry) in enumerate(zip(ids, lps, strict=False)):
        if isinstance(entry, dict):
            item = entry.get(tok)
            if item is None:
                raise ValueError(
                    f"the engine's log-probs of generated token {i} lack the sampled token {tok} "
                    f"(it gave {sorted(entry)[:5]}): the engine must return the sampled token's log-prob"
                )
            vals.append(float(getattr(item, "logprob", item)))
        else:
            vals.append(float(entry))
    if len(vals) != len(ids):
        raise ValueError(f"engine returned {len(vals)} logprobs for {len(ids)} tokens")
    return vals


def extra_logs(run: EpisodeRun, breakdown: RewardBreakdown, replaced_chars: int = 0) -> dict[str, Any]:
    """One scalar tensor per reward part, count and health flag (OpenRLHF averages each key over a
    step's samples: a flag's mean is its share). The counts are the record's: only what the policy
    did, never the prompt's own tags."""
    ep, state, ledger = run.episode, run.state, run.ledger
    values = {
        "truncated": float(bool(ledger and ledger.truncated)),
        "overflowed": float(bool(ledger and ledger.overflowed)),
        **{f"reward_{name}": value for name, value in breakdown.parts().items()},
        "format_valid": float(breakdown.format_valid),
        "turns": float(len(ep.turns)),
        "valid_turns": float(ep.valid_turns),
        "decomposed": float(ep.decomposed),
        "answered": float(ep.answered),
        "searches": float(len(ep.searches)),
        "subqueries": float(sum(ep.subqueries_per_search)),
        "policy_calls": float(state.get("policy_calls", len(run.turns))),
        "search_rounds": float(state.get("search_rounds", 0)),
        "search_errors": float(state.get("errors", 0)),
        "search_failed_share": float(state.get("errors", 0)) / max(float(state.get("subqueries", 0)), 1.0),
        "invalid_chars_replaced": float(replaced_chars),
        "over_search": float(breakdown.unneeded_subqueries),
        "over_searched": float(breakdown.unneeded_subqueries > 0),
        "response_tokens": float(sum(b - a for a, b in ledger.ranges) if ledger else 0),
        **health_signals(ep, breakdown.question_class),
    }
    import torch

    return {k: torch.tensor(float(v)) for k, v in values.items()}


def health_signals(ep: Episode, question_class: str) -> dict[str, float]:
    """Per-sample flags whose step means tell a run's health: the shares of episodes with an
    invalid turn and without an answer, and per question class (parallelizable, sequential,
    single) the class's share, its decomposed episodes, its searches and its sub-queries: the
    decomposition rate of a class is ``decomposed_<class> / class_<class>``, its searches per
    question ``searches_<class> / class_<class>`` (the paper's Table 3 figures) and its
    sub-queries per search ``subqueries_<class> / searches_<class>``."""
    out = {
        "invalid": float(any(t["action"] == "invalid" for t in ep.turns)),
        "unanswered": float(not ep.answered),
    }
    for qclass in QUESTION_CLASSES:
        mine = question_class == qclass
        out[f"class_{qclass}"] = float(mine)
        out[f"decomposed_{qclass}"] = float(mine and ep.decomposed)
        out[f"searches_{qclass}"] = float(len(ep.searches)) if mine else 0.0
        out[f"subqueries_{qclass}"] = float(sum(ep.subqueries_per_search)) if mine else 0.0
    return out


def episode_reward(
    run: EpisodeRun, label: dict[str, Any], cut_episodes: str
) -> tuple[float, RewardBreakdown]:
    """The sample's reward: an episode cut before its answer (the context ran out, or its last
    turn hit its cap) keeps no positive shaped terms (``cut_episodes="unshaped"``); an eval record
    (``make-train-data --eval``) is scored by exact match alone, so OpenRLHF's eval pass@1 is EM."""
    assert run.reward is not None
    breakdown = run.reward
    if run.cut and not run.episode.answered and cut_episodes == "unshaped":
        breakdown = unshaped(breakdown)
    return (breakdown.outcome if label.get("score") == SCORE_EM else breakdown.total), breakdown


def logged_health(health_log: str | None, sample: dict[str, Any]) -> dict[str, Any]:
    """``sample``, its health record appended to ``health_log`` first (when set): every executor
    (text or gateway) writes the record of what it hands OpenRLHF, so the summary reads one format."""
    if health_log:
        from parallelsearch.rl.health import episode_health, write_record

        write_record(health_log, episode_health(sample, time.time()))
    return sample


@dataclasses.dataclass(frozen=True)
class SampleRequest:
    """What OpenRLHF hands an executor for one sample (its ``execute`` arguments, text only)."""

    prompt: Any
    label: Any
    sampling_params: Any
    max_length: int
    tokenizer: Any
    engine: Any


class SampleExecutor(abc.ABC):
    """OpenRLHF's executor contract, in one place: ``execute`` with its signature (a sample with
    images is refused: the agent is text-only); each kind of episode is an :meth:`episode`."""

    async def execute(
        self,
        prompt: str,
        label: Any,
        sampling_params: Any,
        max_length: int,
        hf_tokenizer: Any,
        llm_engine: Any,
        images: Any = None,
    ) -> dict[str, Any]:
        """One episode; OpenRLHF's sample dict."""
        if images:
            raise ValueError("the ParallelSearch agent is text-only; this sample carries images")
        return await self.episode(
            SampleRequest(prompt, label, sampling_params, max_length, hf_tokenizer, llm_engine)
        )

    @abc.abstractmethod
    async def episode(self, request: SampleRequest) -> dict[str, Any]:
        """One episode of this executor's kind; OpenRLHF's sample dict."""


class EpisodeExecutor(SampleExecutor):
    """Runs OpenRLHF samples as episodes of ``env_graph``, with OpenRLHF's ``execute`` signature:
    the agent module's executor is this class with the agent config's knobs."""

    def __init__(
        self,
        env_graph: EnvGraph,
        *,
        max_new_tokens_per_turn: int | None = None,
        constrained: bool = False,
        think_chars: int = 600,
        search_guard: SearchFailureGuard | None = None,
        cut_episodes: str = "unshaped",
        health_log: str | None = None,
        max_observation_tokens: int | None = None,
    ) -> None:
        self.env_graph = env_graph
        self.max_observation_tokens = max_observation_tokens
        self.cut_episodes = cut_episodes
        self.health_log = health_log
        self.prompt_checked = False  # the first prompt is checked against the reward mode
        self.max_new_tokens_per_turn = max_new_tokens_per_turn
        self.constrained = constrained
        self.think_chars = think_chars
        self.search_guard = search_guard

    def _engine_turns(
        self, sampling_params: Any, llm_engine: Any, turn_cap: int, want_lp: bool
    ) -> TurnGenerator:
        """Turns from OpenRLHF's engine: the ledger's ids in, the turn's ids (and log-probs) out,
        under the request's stop strings, a per-turn cap and, constrained, its grammar."""

        async def generate(request: TurnRequest, ledger: TokenLedger | None) -> Generated:
            assert ledger is not None
            regex = None
            if self.constrained:
                regex = get_protocol(request.protocol).grammar(
                    final=request.final,
                    split=request.allow_split,
                    max_subqueries=request.max_subqueries,
                    max_stages=request.max_stages,
                    think_chars=self.think_chars,
                )
            room = ledger.room() or turn_cap
            params = turn_params(
                sampling_params, stop=request.stop, max_tokens=min(turn_cap, room), regex=regex
            )
            out = (await llm_engine.generate(ledger.ids, params)).outputs[0]
            ids = list(out.token_ids)
            lps = sampled_logprobs(out, ids) if want_lp else None
            return Generated("", ids, lps, out.finish_reason)

        return generate

    def _checked_prompt(self, prompt: Any) -> tuple[Any, int]:
        """The prompt, its lone surrogates (a dataset's ``"\\ud800"`` escape, which cannot be
        tokenized) replaced and counted; the first prompt is checked against the reward mode."""
        if not self.prompt_checked:
            from parallelsearch.rl.preflight_prompt import check_episode_prompt

            check_episode_prompt(self.env_graph.reward_mode, prompt)
            self.prompt_checked = True
        clean, replaced = scrub_text(prompt) if isinstance(prompt, str) else (prompt, 0)
        if replaced:
            log.warning(
                "replaced %d invalid character(s) (lone surrogates) in a prompt with U+FFFD", replaced
            )
        return clean, replaced

    def _turn_cap(self, sampling_params: Any) -> int:
        """Tokens one turn may generate: the executor's cap, or the graph's, within OpenRLHF's."""
        turn_cap = self.max_new_tokens_per_turn or self.env_graph.config.max_new_tokens
        outer_cap = getattr(sampling_params, "max_tokens", None)
        return min(turn_cap, int(outer_cap)) if outer_cap else turn_cap

    async def episode(self, r: SampleRequest) -> dict[str, Any]:
        """One episode of ``env_graph``; OpenRLHF's sample dict.

        The environment gets each turn as the decoded generated ids, not the engine's ``text``:
        vLLM cuts ``text`` right after a stop string but keeps the whole token that completed it
        (Qwen's ``>\n\n``). So ``decode_tokens(observation_tokens)`` is exactly the episode the
        environment and the reward saw. ``constrained`` decodes every turn under the protocol's
        grammar (its log-probs are then off-policy: docs/vllm.md); ``search_guard`` stops the run
        past its limits of failed searches instead of training on ``Search failed`` observations.
        """
        lab = parse_label(r.label)
        clean_prompt, replaced = self._checked_prompt(r.prompt)
        turn_cap = self._turn_cap(r.sampling_params)
        want_lp = getattr(r.sampling_params, "logprobs", None) is not None
        run = await run_episode(
            self.env_graph,
            question_from(clean_prompt, lab),
            lab,
            self._engine_turns(r.sampling_params, r.engine, turn_cap, want_lp),
            ledger_for=lambda _: TokenLedger(
                r.tokenizer,
                clean_prompt,
                r.max_length,
                turn_cap=turn_cap,
                observation_cap=self.max_observation_tokens,
            ),
        )
        if self.search_guard is not None:
            self.search_guard.record(run.state)
        assert run.ledger is not None
        ledger = run.ledger
        reward, breakdown = episode_reward(run, lab, self.cut_episodes)
        result = {
            "prompt": r.prompt,
            "label": r.label,
            "images": None,
            "mm_train_inputs": None,
            "reward": float(reward),
            "scores": float(breakdown.outcome),
            "observation_tokens": ledger.ids,
            "action_ranges": ledger.ranges,
            "rollout_log_probs": [lp or 0.0 for lp in ledger.logprobs] if want_lp else None,
            "truncated": ledger.truncated,  # OpenRLHF's meaning: the last turn stopped on length
            "extra_logs": extra_logs(run, breakdown, replaced),
        }
        return logged_health(self.health_log, result)
