"""Rollouts: run the environment with any policy over a question file and record every episode.

Each episode goes through :class:`SearchEnv` exactly as a training episode does (the
policy stands where the trainer's engine stands). Output: one jsonl line per episode
(text, turns, token counts, reward parts, counts), a printed summary, and optionally the
episodes with a correct answer as an OpenRLHF SFT dataset for a warm start.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from parallelsearch.agents.policies.base import TurnRequest
from parallelsearch.rl.data import label_of
from parallelsearch.rl.env import EnvGraph


async def run_episode(env_graph: EnvGraph, policy: Any, q: dict[str, Any]) -> dict[str, Any]:
    """One episode of ``policy`` in the environment; failures become an ``error`` field, never a crash."""
    t0 = time.perf_counter()
    label = label_of(q)
    env = env_graph.new_episode()
    turns: list[dict[str, Any]] = []
    rec: dict[str, Any] = {
        "id": q.get("id"),
        "question": q.get("question"),
        **{k: label[k] for k in ("type", "split")},
    }
    rec["golden_answers"] = label["golden_answers"]
    try:
        prompt = await env.reset(q["question"], label, q.get("metadata") or {})
        step = None
        while step is None or not step.done:
            turn = env.turn or {}
            request = TurnRequest(
                transcript=env.transcript,
                segments=[tuple(s) for s in turn.get("segments") or []],
                stop=tuple(turn.get("stop") or ("</search>", "</answer>")),
                max_tokens=int(turn.get("max_tokens") or 500),
                turn_index=int(turn.get("turn_index") or 0),
                final=bool(turn.get("final")),
                allow_split=bool(turn.get("allow_split", True)),
                max_subqueries=int(turn.get("max_subqueries") or 8),
                question=q["question"],
                metadata={**(q.get("metadata") or {}), **label},
            )
            res = await policy.agenerate(request)
            step = await env.step(res.text if isinstance(res.text, str) else "")
            turns.append(
                {
                    "text": res.text,
                    "observation": step.observation,
                    "prompt_tokens": res.prompt_tokens,
                    "completion_tokens": res.completion_tokens,
                    "finish_reason": res.finish_reason,
                }
            )
        out = step.output
        reward = step.reward
        rec.update(
            prompt=prompt,
            text=env.transcript,
            answer=out.get("answer"),
            status=out.get("status"),
            turns=turns,
            policy_calls=out.get("policy_calls"),
            search_rounds=out.get("search_rounds"),
            subqueries=out.get("subqueries"),
            passages=out.get("passages"),
            search_errors=out.get("errors"),
            completion_tokens=sum(t["completion_tokens"] or 0 for t in turns)
            if any(t["completion_tokens"] is not None for t in turns)
            else None,
            reward=reward.to_dict() if reward else None,
            error=None,
        )
    except Exception as e:  # noqa: BLE001 - one bad episode is reported, the rollout goes on
        env.close()
        rec.update(turns=turns, error=f"{type(e).__name__}: {e}"[:500], reward=None)
    rec["ms"] = round((time.perf_counter() - t0) * 1000, 3)
    return rec


@dataclass
class RolloutSummary:
    episodes: int = 0
    failures: int = 0
    rewards: list[float] = field(default_factory=list)
    parts: dict[str, list[float]] = field(default_factory=dict)
    format_valid: list[bool] = field(default_factory=list)
    correct: list[bool] = field(default_factory=list)
    decomposed_parallel: list[bool] = field(default_factory=list)
    policy_calls: list[int] = field(default_factory=list)
    sft_written: int = 0
    first_errors: dict[str, str] = field(default_factory=dict)  # error kind -> first message
    error_counts: dict[str, int] = field(default_factory=dict)  # error kind -> episodes
    searches: int = 0  # sub-queries searched
    failed_searches: int = 0
    episodes_with_failed_searches: int = 0

    def add(self, rec: dict[str, Any]) -> None:
        self.episodes += 1
        self.searches += int(rec.get("subqueries") or 0)
        failed = int(rec.get("search_errors") or 0)
        self.failed_searches += failed
        self.episodes_with_failed_searches += bool(failed)
        r = rec.get("reward")
        if rec.get("error") or r is None:
            self.failures += 1
            message = str(rec.get("error") or "episode ended without a reward")
            kind = message.split(":", 1)[0]
            self.error_counts[kind] = self.error_counts.get(kind, 0) + 1
            self.first_errors.setdefault(kind, message)
            return
        self.rewards.append(r["total"])
        for part in ("outcome", "decomposition", "search_count", "format"):
            self.parts.setdefault(part, []).append(r[part])
        self.format_valid.append(r["format_valid"])
        self.correct.append(r["correct"])
        if r["question_class"] == "parallel":
            self.decomposed_parallel.append(r["decomposed"])
        if rec.get("policy_calls") is not None:
            self.policy_calls.append(rec["policy_calls"])

    def to_dict(self) -> dict[str, Any]:
        def mean(xs: Sequence[float]) -> float | None:
            return round(statistics.fmean(xs), 4) if xs else None

        return {
            "episodes": self.episodes,
            "failures": self.failures,
            "mean_reward": mean(self.rewards),
            "mean_parts": {k: mean(v) for k, v in self.parts.items()},
            "em": mean([float(x) for x in self.correct]),
            "format_valid_pct": None
            if not self.format_valid
            else round(100 * mean([float(x) for x in self.format_valid]), 2),
            "decomposition_ratio_parallel": mean([float(x) for x in self.decomposed_parallel]),
            "parallel_questions": len(self.decomposed_parallel),
            "mean_policy_calls": mean(self.policy_calls),
            "sft_written": self.sft_written,
            "error_counts": dict(self.error_counts),
            "first_errors": dict(self.first_errors),
            "searches": self.searches,
            "failed_searches": self.failed_searches,
            "episodes_with_failed_searches": self.episodes_with_failed_searches,
        }

    def lines(self) -> list[str]:
        d = self.to_dict()
        parts = ", ".join(f"{k} {v}" for k, v in d["mean_parts"].items())
        return (
            [
                f"episodes {d['episodes']}, failures {d['failures']}, failed searches "
                f"{d['failed_searches']} of {d['searches']} (in {d['episodes_with_failed_searches']} episodes)",
                f"mean reward {d['mean_reward']} ({parts})",
                f"EM {d['em']}, format valid {d['format_valid_pct']}%",
                f"decomposition ratio on {d['parallel_questions']} parallelizable questions: {d['decomposition_ratio_parallel']}",
                f"policy calls per episode {d['mean_policy_calls']}",
            ]
            + ([f"SFT examples written {d['sft_written']}"] if d["sft_written"] else [])
            + [
                f"{n} episode(s) failed with {kind}; first: {self.first_errors[kind]}"
                for kind, n in sorted(self.error_counts.items(), key=lambda kv: -kv[1])
            ]
        )


def sft_record(rec: dict[str, Any]) -> dict[str, Any]:
    """OpenRLHF SFT format: prompt + response (the response holds the observations as the model saw them)."""
    return {"prompt": rec["prompt"], "response": rec["text"][len(rec["prompt"]) :], "id": rec["id"]}


async def rollout(
    questions: Sequence[dict[str, Any]],
    env_graph: EnvGraph,
    policy: Any,
    out: str | Path,
    *,
    concurrency: int = 8,
    sft_out: str | Path | None = None,
    progress: bool = True,
) -> RolloutSummary:
    """Run every question (``concurrency`` at a time), writing each episode as it finishes."""
    from tqdm.auto import tqdm

    if concurrency < 1:
        raise ValueError("concurrency must be >= 1")
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    summary = RolloutSummary()
    sem = asyncio.Semaphore(concurrency)

    async def one(q: dict[str, Any]) -> dict[str, Any]:
        async with sem:
            return await run_episode(env_graph, policy, q)

    sft_f = open(sft_out, "w", encoding="utf-8") if sft_out else None  # noqa: SIM115 - closed below
    try:
        with (
            out.open("w", encoding="utf-8") as f,
            tqdm(total=len(questions), disable=not progress, desc="rollout") as bar,
        ):
            for fut in asyncio.as_completed([one(q) for q in questions]):
                rec = await fut
                f.write(json.dumps(rec, ensure_ascii=False) + "\n")
                f.flush()
                summary.add(rec)
                if sft_f and rec.get("reward") and rec["reward"]["correct"]:
                    sft_f.write(json.dumps(sft_record(rec), ensure_ascii=False) + "\n")
                    summary.sft_written += 1
                bar.update(1)
    finally:
        if sft_f:
            sft_f.close()
    return summary
