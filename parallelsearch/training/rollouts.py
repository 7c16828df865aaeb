"""Rollouts of the CPU smoke through OpenRLHF's rollout actor, the engine's turns recorded, and their
scores.

Each episode is one ``generate_responses`` call with its own sampling seed (vLLM's per-request
``seed``, one per turn), so a held-out evaluation repeated after training, and a control run, sample
with the same random numbers as the run they are compared with: their differences are the weights',
not the dice's.
"""

from __future__ import annotations

import asyncio
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from parallelsearch.rl.rewards import REWARD_PARTS
from parallelsearch.training.checks import EngineTurn


class RecordingEngine:
    """Stands between the executor and the rollout actor (the executor's ``llm_engine``): forwards every
    call, keeps each turn, and gives each turn of a seeded episode its own seed (the episode's seed and
    the turn's number), since the executor sends every turn with the episode's sampling parameters and
    one seed would replay one random stream turn after turn."""

    def __init__(self, engine: Any) -> None:
        self.engine = engine
        self.turns: list[EngineTurn] = []

    async def generate(
        self, prompt_token_ids: list[int], sampling_params: Any, *args: Any, **kwargs: Any
    ) -> Any:
        if getattr(sampling_params, "seed", None) is not None:
            sampling_params = sampling_params.clone()
            sampling_params.seed = sampling_params.seed * 100 + len(self.turns)
        out = await self.engine.generate(prompt_token_ids, sampling_params, *args, **kwargs)
        first = out.outputs[0]
        self.turns.append(EngineTurn(list(prompt_token_ids), list(first.token_ids), first.text))
        return out

    def __getattr__(self, name: str) -> Any:
        return getattr(self.engine, name)


def record_engine_turns(actor: Any) -> None:
    """Make the rollout actor's executor run through a :class:`RecordingEngine` per episode; the turns
    come back in the sample dict under ``engine_turns`` (OpenRLHF ignores keys it does not read): the
    turns the sample holds, so a gateway sample restarted at a fork keeps the turns since then."""
    execute = actor.executor.execute

    async def recorded(*args: Any, llm_engine: Any, **kwargs: Any) -> dict[str, Any]:
        engine = RecordingEngine(llm_engine)
        result = await execute(*args, llm_engine=engine, **kwargs)
        untrained = int(float(result.get("extra_logs", {}).get("gateway_untrained_turns", 0)))
        return {**result, "engine_turns": engine.turns[untrained:]}

    actor.executor.execute = recorded


#: the reward's parts as the executor's ``extra_logs`` names them (from the one list in rl/rewards.py)
PART_TERMS = tuple(f"reward_{name}" for name in REWARD_PARTS)
#: the reward terms and health flags each step and evaluation reports (``extra_logs`` keys)
TERMS = (*PART_TERMS, "format_valid", "decomposed", "search_rounds", "over_searched", "turns", "valid_turns")


def parts_said(row: dict[str, Any], fmt: str, sep: str = ", ") -> str:
    """The reward's parts of ``row`` (its ``reward_<part>`` keys) as ``name value`` text."""
    return sep.join(f"{name} {row[f'reward_{name}']:{fmt}}" for name in REWARD_PARTS)


async def rollouts(
    actor: Any,
    records: Sequence[dict[str, Any]],
    seeds: Sequence[int],
    *,
    max_length: int,
    tokenizer: Any,
    temperature: float = 1.0,
    top_p: float = 1.0,
    concurrency: int | None = None,
) -> list[dict[str, Any]]:
    """One episode per (record, seed), in that order, through ``actor.generate_responses`` with the
    sampling parameters OpenRLHF's samples generator sends (plus the seed). ``concurrency`` episodes
    at a time (None: all): with 1 every engine call and every search is alone in its batch, so the
    numbers do not depend on which other episodes shared a batch, and a rerun repeats them exactly."""
    from parallelsearch.rl.openrlhf_cpu import samples_generator_params

    sem = asyncio.Semaphore(concurrency or max(len(records), 1))

    async def one(rec: dict[str, Any], seed: int) -> dict[str, Any]:
        params = samples_generator_params(seed=seed, temperature=temperature, top_p=top_p)
        async with sem:
            return await _episode(rec, params)

    async def _episode(rec: dict[str, Any], params: Any) -> dict[str, Any]:
        out = await actor.generate_responses(
            prompt=rec["prompt"],
            label=rec["label"],
            sampling_params=params,
            max_length=max_length,
            hf_tokenizer=tokenizer,
            num_samples=1,
        )
        return out[0]

    return list(await asyncio.gather(*(one(r, s) for r, s in zip(records, seeds, strict=True))))


def term_means(results: Sequence[dict[str, Any]]) -> dict[str, float]:
    """The mean of the reward and of each of :data:`TERMS` over ``results``."""
    out = {"reward": statistics.fmean(float(r["reward"]) for r in results)}
    for key in TERMS:
        out[key] = statistics.fmean(float(r["extra_logs"][key]) for r in results)
    return {k: round(v, 4) for k, v in out.items()}


@dataclass
class Evaluation:
    """A held-out evaluation: its mean reward, the standard error of that mean, and the terms by class."""

    mean: float
    stderr: float
    episodes: int
    terms: dict[str, float]
    by_class: dict[str, dict[str, float]] = field(default_factory=dict)
    #: parallelizable episodes paid the decomposition bonus without a measured split, or the other way
    decomposition_mismatches: int = 0
    format_valid_stderr: float = 0.0
    #: the standard error of the mean outcome term (exact match, the answer's score alone)
    outcome_stderr: float = 0.0
    #: the share of all the episodes' turns that are valid actions (a warm start's per-turn format
    #: validity), and how many turns there were
    valid_turn_share: float = 0.0
    turns: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "outcome_stderr": self.outcome_stderr,
            "mean": self.mean,
            "stderr": self.stderr,
            "episodes": self.episodes,
            "terms": self.terms,
            "by_class": self.by_class,
            "decomposition_mismatches": self.decomposition_mismatches,
            "format_valid_stderr": self.format_valid_stderr,
            "valid_turn_share": self.valid_turn_share,
            "turns": self.turns,
        }


def paid_split(result: dict[str, Any]) -> bool:
    """The episode was paid the decomposition bonus of a parallelizable question."""
    return float(result["extra_logs"]["reward_decomposition"]) > 0


def measured_split(result: dict[str, Any]) -> bool:
    """The record shows a split search, in an episode the trainer scores whole (one cut before its
    answer keeps no positive shaped term: docs/training.md, "Episodes cut before their answer")."""
    logs = result["extra_logs"]
    cut = (float(logs["truncated"]) or float(logs["overflowed"])) and not float(logs["answered"])
    return bool(float(logs["decomposed"])) and not cut


def _decomposition_facts(group: Sequence[dict[str, Any]]) -> tuple[dict[str, float], int]:
    """A parallelizable class's paid and measured decomposition shares, and the episodes where they differ."""
    paid = [paid_split(r) for r in group]
    measured = [measured_split(r) for r in group]
    shares = {
        "paid_decomposition": round(statistics.fmean(paid), 4),
        "measured_decomposition": round(statistics.fmean(measured), 4),
    }
    return shares, sum(p != m for p, m in zip(paid, measured, strict=True))


def evaluation(results: Sequence[dict[str, Any]], classes: Sequence[str]) -> Evaluation:
    """:class:`Evaluation` of ``results``; ``classes`` is each result's question class."""
    rewards = [float(r["reward"]) for r in results]
    stderr = statistics.stdev(rewards) / math.sqrt(len(rewards)) if len(rewards) > 1 else float("nan")
    groups: dict[str, list[dict[str, Any]]] = {}
    for r, c in zip(results, classes, strict=True):
        groups.setdefault(c, []).append(r)
    by_class = {c: {"episodes": len(g), **term_means(g)} for c, g in sorted(groups.items())}
    mismatches = 0
    if "parallel" in groups:
        shares, mismatches = _decomposition_facts(groups["parallel"])
        by_class["parallel"].update(shares)
    valid_se = _stderr([float(r["extra_logs"]["format_valid"]) for r in results])
    turns = sum(float(r["extra_logs"]["turns"]) for r in results)
    valid_turns = sum(float(r["extra_logs"]["valid_turns"]) for r in results)
    return Evaluation(
        mean=round(statistics.fmean(rewards), 4),
        stderr=round(stderr, 4),
        episodes=len(rewards),
        terms=term_means(results),
        by_class=by_class,
        decomposition_mismatches=mismatches,
        format_valid_stderr=round(valid_se, 4),
        outcome_stderr=round(_stderr([float(r["extra_logs"]["reward_outcome"]) for r in results]), 4),
        valid_turn_share=round(valid_turns / turns, 4) if turns else 0.0,
        turns=int(turns),
    )


def _stderr(values: Sequence[float]) -> float:
    return statistics.stdev(values) / math.sqrt(len(values)) if len(values) > 1 else 0.0
