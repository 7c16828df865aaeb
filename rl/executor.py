"""One OpenRLHF episode over the graph environment, with exact token bookkeeping.

The loop is docs/architecture.md's "A training episode": ``action_ranges`` are exactly the
generated spans, so retrieved text never enters the loss, and the reward is
:func:`score_trajectory` on the decoded episode. No OpenRLHF import here:
``openrlhf_agent.py`` wraps it, and tests call it with engine stand-ins too.
"""

from __future__ import annotations

import copy
import dataclasses
import logging
import re
import warnings
from collections.abc import Coroutine
from typing import Any

from parallelsearch.agents.protocol import DEFAULT_MAX_STAGES, protocol_regex
from parallelsearch.rl.data import SCORE_EM
from parallelsearch.rl.env import EnvGraph
from parallelsearch.rl.rewards import RewardBreakdown, parse_label, score_trajectory, unshaped
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


def _logprobs(out: Any, ids: list[int]) -> list[float]:
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


def decode_tokens(tokenizer: Any, tokens: list[int]) -> str:
    """Token ids -> text, exactly: special tokens kept, no clean-up of spaces.

    The episode's one decoding. Everything the environment, the reward and the next turn
    see is decoded this way from the ids the policy is trained on, so text and tokens never
    drift apart (for byte-level BPE tokenizers such as Qwen's, decoding is then exactly
    additive: ``decode(a + b) == decode(a) + decode(b)``).
    """
    return tokenizer.decode(tokens, skip_special_tokens=False, clean_up_tokenization_spaces=False)


def extra_logs(
    breakdown: RewardBreakdown,
    state: dict[str, Any],
    turns: int,
    replaced_chars: int = 0,
    *,
    truncated: bool = False,
    overflowed: bool = False,
) -> dict[str, Any]:
    """One scalar tensor per reward part and per count (OpenRLHF logs each key, averaged over a
    step's samples: a flag's mean is its share)."""
    values = {
        "truncated": float(truncated),
        "overflowed": float(overflowed),
        "reward_outcome": breakdown.outcome,
        "reward_decomposition": breakdown.decomposition,
        "reward_search_count": breakdown.search_count,
        "reward_format": breakdown.format,
        "format_valid": float(breakdown.format_valid),
        "decomposed": float(breakdown.decomposed),
        "answered": float(breakdown.answer is not None),
        "searches": float(breakdown.searches),
        "policy_calls": float(state.get("policy_calls", turns)),
        "search_rounds": float(state.get("search_rounds", 0)),
        "subqueries": float(state.get("subqueries", 0)),
        "search_errors": float(state.get("errors", 0)),
        "search_failed_share": float(state.get("errors", 0)) / max(float(state.get("subqueries", 0)), 1.0),
        "invalid_chars_replaced": float(replaced_chars),
        **health_signals(breakdown, state),
    }
    import torch

    return {k: torch.tensor(float(v)) for k, v in values.items()}


def health_signals(breakdown: RewardBreakdown, state: dict[str, Any]) -> dict[str, float]:
    """Per-sample flags whose step means tell a run's health: the shares of episodes with an
    invalid turn and without an answer, and per question class (parallelizable, sequential) the
    class's share, its decomposed episodes and its searches: OpenRLHF averages every key over the
    step's samples, so the decomposition rate of a class is ``decomposed_<class> / class_<class>``
    and its searches per question ``searches_<class> / class_<class>``."""
    turns = [e for e in state.get("trajectory") or () if e.get("type") == "turn"]
    out = {
        "invalid": float(any(t.get("action") == "invalid" for t in turns)),
        "unanswered": float(not state.get("answer")),
    }
    for qclass in ("parallel", "sequential"):
        mine = breakdown.question_class == qclass
        out[f"class_{qclass}"] = float(mine)
        out[f"decomposed_{qclass}"] = float(mine and breakdown.decomposed)
        out[f"searches_{qclass}"] = float(breakdown.searches) if mine else 0.0
    return out


class EpisodeExecutor:
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
    ) -> None:
        self.env_graph = env_graph
        self.cut_episodes = cut_episodes
        self.prompt_checked = False  # the first prompt is checked against the reward mode
        self.max_new_tokens_per_turn = max_new_tokens_per_turn
        self.constrained = constrained
        self.think_chars = think_chars
        self.search_guard = search_guard

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
        """One episode; OpenRLHF's sample dict (a sample with images is refused: text only).

        The environment gets each turn as the decoded generated ids, not the engine's ``text``:
        vLLM cuts ``text`` right after a stop string but keeps the whole token that completed it
        (Qwen's ``>\n\n``). So ``decode_tokens(observation_tokens)`` is exactly the episode the
        environment and the reward saw. ``constrained`` decodes every turn under the protocol's
        grammar (its log-probs are then off-policy: docs/vllm.md); ``search_guard`` stops the run
        past its limits of failed searches instead of training on ``Search failed`` observations.
        """
        if images:
            raise ValueError("the ParallelSearch agent is text-only; this sample carries images")
        lab = parse_label(label)
        if not self.prompt_checked:
            from parallelsearch.rl.preflight import check_episode_prompt

            check_episode_prompt(self.env_graph.reward_mode, prompt)
            self.prompt_checked = True
        # a prompt with lone surrogates (a dataset's "\ud800" escape) cannot be tokenized
        clean_prompt, replaced = scrub_text(prompt) if isinstance(prompt, str) else (prompt, 0)
        if replaced:
            log.warning(
                "replaced %d invalid character(s) (lone surrogates) in a prompt with U+FFFD", replaced
            )
        env = self.env_graph.new_episode()
        await env.reset(question_from(clean_prompt, lab), lab)
        turn_cap = self.max_new_tokens_per_turn or (env.turn or {}).get("max_tokens") or 500
        outer_cap = getattr(sampling_params, "max_tokens", None)
        if outer_cap:
            turn_cap = min(turn_cap, int(outer_cap))

        tokens: list[int] = list(hf_tokenizer(clean_prompt, add_special_tokens=False)["input_ids"])
        # room for one whole turn after it, as OpenRLHF's executors leave (a turn cap at least the
        # whole context cannot be honoured: then one token, as before)
        prompt_room = max_length - turn_cap if turn_cap < max_length else max_length - 1
        prompt_cut = len(tokens) > prompt_room  # the context ran out before the first turn
        if prompt_cut:
            log.warning(
                "prompt of %d tokens leaves no room for a turn of %d in max_length %d; keeping its last %d",
                len(tokens), turn_cap, max_length, prompt_room,
            )  # fmt: skip
            tokens = tokens[-prompt_room:]
        prompt_len = len(tokens)
        want_lp = getattr(sampling_params, "logprobs", None) is not None
        rollout_lp: list[float] | None = [0.0] * len(tokens) if want_lp else None
        ranges: list[tuple[int, int]] = []
        truncated = False  # OpenRLHF's meaning: the last turn stopped on length (its token cap)
        overflowed = False  # the context (max_length) ran out: a turn or an observation was cut
        final_state: dict[str, Any] = {}
        turns = 0
        try:
            while True:
                budget = max_length - len(tokens)
                if budget <= 0:
                    overflowed = True
                    break
                turn = env.turn  # the pending turn the graph asked for (never None while the episode runs)
                regex = None
                if self.constrained:
                    regex = protocol_regex(
                        final=bool(turn.get("final")),
                        split=bool(turn.get("allow_split", True)),
                        max_subqueries=int(turn.get("max_subqueries") or 8),
                        max_stages=int(turn.get("max_stages") or DEFAULT_MAX_STAGES),
                        think_chars=self.think_chars,
                        protocol=self.env_graph.protocol,
                    )
                stop = tuple(turn["stop"])  # the protocol's: the tags' or the tool-call text form's
                params = turn_params(
                    sampling_params, stop=stop, max_tokens=min(turn_cap, budget), regex=regex
                )
                out = (await llm_engine.generate(tokens, params)).outputs[0]
                ids = list(out.token_ids)
                ranges.append((len(tokens), len(tokens) + len(ids)))
                tokens.extend(ids)
                turns += 1
                if rollout_lp is not None:
                    rollout_lp.extend(_logprobs(out, ids))
                truncated = out.finish_reason == "length"
                overflowed = truncated and len(tokens) >= max_length
                step = await env.step(decode_tokens(hf_tokenizer, ids))
                observation, bad = scrub_text(step.observation or "")  # the protocol already scrubs passages
                replaced += bad
                obs_ids = (
                    list(hf_tokenizer(observation, add_special_tokens=False)["input_ids"])
                    if observation
                    else []
                )
                room = max_length - len(tokens)
                if len(obs_ids) > room:
                    obs_ids, overflowed = obs_ids[:room], True
                tokens.extend(obs_ids)
                if rollout_lp is not None:
                    rollout_lp.extend([0.0] * len(obs_ids))
                if step.done:
                    final_state = step.output
                    break
                if overflowed:
                    break
            if not final_state:  # cut short: the counts so far (searches, failures) still count
                final_state = await env.values()
        finally:
            env.close()
        if self.search_guard is not None:
            self.search_guard.record(final_state)

        text = decode_tokens(hf_tokenizer, tokens)
        prompt_text = decode_tokens(hf_tokenizer, tokens[:prompt_len])
        mode, weights = self.env_graph.reward_mode, self.env_graph.reward_weights
        breakdown = score_trajectory(
            text, lab, mode, prompt=prompt_text, protocol=self.env_graph.protocol, **weights
        )
        overflowed = overflowed or prompt_cut
        if (overflowed or truncated) and not final_state.get("answer") and self.cut_episodes == "unshaped":
            breakdown = unshaped(breakdown)  # cut before its answer: no positive shaped terms
        # an eval record (make-train-data --eval) is scored by EM alone: OpenRLHF's eval pass@1 is then EM
        reward = breakdown.outcome if lab.get("score") == SCORE_EM else breakdown.total
        return {
            "prompt": prompt,
            "label": label,
            "images": None,
            "mm_train_inputs": None,
            "reward": float(reward),
            "scores": float(breakdown.outcome),
            "observation_tokens": tokens,
            "action_ranges": ranges,
            "rollout_log_probs": rollout_lp,
            "truncated": truncated,
            "extra_logs": extra_logs(
                breakdown, final_state, turns, replaced, truncated=truncated, overflowed=overflowed
            ),
        }


def execute_episode(env_graph: EnvGraph, *sample: Any, **named: Any) -> Coroutine[Any, Any, dict[str, Any]]:
    """Deprecated in 0.3 (removed in 0.4): ``EpisodeExecutor(env_graph, **knobs).execute(*sample)``;
    the sample by position or by name, as before."""
    warnings.warn(
        "execute_episode is deprecated; use EpisodeExecutor(env_graph, **knobs).execute(...)",
        DeprecationWarning,
        stacklevel=2,
    )
    knobs = {
        k: named.pop(k)
        for k in ("max_new_tokens_per_turn", "constrained", "think_chars", "search_guard", "cut_episodes")
        if k in named
    }
    return EpisodeExecutor(env_graph, **knobs).execute(*sample, **named)
