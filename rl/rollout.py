"""Rollouts: run the environment with any policy over a question file and record every episode.

Each episode is driven by the one episode loop training uses (``parallelsearch.rl.episode``; the
policy stands where the trainer's engine stands), written as one jsonl line (with a tokenizer
also the tokens, action mask and log-probs the executor would hand OpenRLHF), with a printed
summary and optionally the correct episodes as an OpenRLHF multi-turn SFT dataset (:func:`sft_record`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from parallelsearch.agents.protocol import TurnRequest
from parallelsearch.rl.data import label_of, prompt_question
from parallelsearch.rl.env import EnvGraph
from parallelsearch.rl.episode import EpisodeRun, Generated, TokenLedger, TurnGenerator, run_episode
from parallelsearch.rl.executor import episode_reward
from parallelsearch.rl.rewards import REWARD_PARTS

#: ChatML's user turn around a prompt: the frame of the official reward when no tokenizer is given
CHATML = "<|im_start|>user\n{prompt}<|im_end|>\n<|im_start|>assistant\n"


@dataclass(frozen=True)
class Replay:
    """How a training job frames and scores an episode, so a rollout replays it: the question as
    ``make-train-data`` writes it, the chat template OpenRLHF applies to the prompt (the
    tokenizer's, through OpenRLHF's own ``preprocess_data``; ChatML without a tokenizer), the
    context and per-turn token caps, and the rule for episodes cut before their answer."""

    chat_template: bool = False
    tokenizer: Any = None
    max_length: int | None = None
    turn_cap: int | None = None
    cut_episodes: str = "unshaped"
    observation_cap: int | None = None
    training_question: bool = False  # reset with the question as the training record holds it

    def frame(self, prompt: str) -> str:
        """The prompt as the policy's context holds it in training."""
        if not self.chat_template:
            return prompt
        if self.tokenizer is None:
            return CHATML.format(prompt=prompt)
        try:
            from parallelsearch.rl.openrlhf_cpu import preprocess_data

            framed, _ = preprocess_data()(
                {"prompt": prompt}, input_key="prompt", apply_chat_template=self.tokenizer.apply_chat_template
            )
            return framed
        except ImportError:  # no OpenRLHF here: the same call it makes, with the prompt as text
            return self.tokenizer.apply_chat_template(
                [{"role": "user", "content": prompt}], tokenize=False, add_generation_prompt=True
            )

    def ledger(self, prompt: str) -> TokenLedger | None:
        if self.tokenizer is None:
            return None
        return TokenLedger(
            self.tokenizer,
            self.frame(prompt),
            self.max_length,
            turn_cap=self.turn_cap,
            observation_cap=self.observation_cap,
        )

    def question(self, q: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        """The question the environment is reset with, and the label the reward reads."""
        label = label_of(q)
        if not self.training_question:
            return q["question"], label
        question = prompt_question(q["question"])
        return question, {**label, "question": question}


def _policy_turns(policy: Any) -> TurnGenerator:
    """Turns from a policy: the request as the graph built it, with the ledger's ids when tokens
    are kept (token-in/token-out backends return the turn's ids and log-probs)."""

    async def generate(request: TurnRequest, ledger: TokenLedger | None) -> Generated:
        if ledger is not None:
            room = ledger.room()  # as the executor caps a turn: never past the context
            cap = request.max_tokens if room is None else min(request.max_tokens, room)
            request = replace(request, token_ids=list(ledger.ids), logprobs=True, max_tokens=cap)
        res = await policy.agenerate(request)
        info = {
            "prompt_tokens": res.prompt_tokens,
            "completion_tokens": res.completion_tokens,
            "finish_reason": res.finish_reason,
            "labels": list(res.labels),
        }
        text = res.text if isinstance(res.text, str) else ""
        return Generated(text, res.token_ids or None, res.logprobs, res.finish_reason, info)

    return generate


def _token_fields(ledger: TokenLedger) -> dict[str, Any]:
    return {
        "token_ids": ledger.ids,
        "action_mask": ledger.mask(),
        "logprobs": ledger.logprobs if any(lp is not None for lp in ledger.logprobs) else None,
        "retokenized_turns": ledger.retokenized,
    }


async def rollout_episode(
    env_graph: EnvGraph,
    policy: Any,
    q: dict[str, Any],
    *,
    tokenizer: Any = None,
    replay: Replay | None = None,
) -> dict[str, Any]:
    """One episode of ``policy`` in the environment as one record; a failure becomes an ``error``
    field, never a crash. With a tokenizer (``tokenizer`` or ``replay``'s) the record carries the
    episode's tokens, action mask and log-probs, and the environment gets each turn decoded from
    the policy's ids, as in training; ``replay`` frames and scores the episode as a training job does.
    """
    t0 = time.perf_counter()
    replay = replay or Replay(tokenizer=tokenizer)
    question, label = replay.question(q)
    rec: dict[str, Any] = {
        "id": q.get("id"),
        "question": q.get("question"),
        **{k: label[k] for k in ("type", "split", "golden_answers")},
    }
    try:
        run = await run_episode(
            env_graph,
            question,
            label,
            _policy_turns(policy),
            metadata=q.get("metadata") or {},
            ledger_for=replay.ledger,
            chat=replay.frame,
        )
        rec.update(_record_fields(run, label, replay.cut_episodes))
    except Exception as e:  # noqa: BLE001 - one bad episode is reported, the rollout goes on
        rec.update(turns=[], error=f"{type(e).__name__}: {e}"[:500], reward=None)
    rec["labels"] = sorted({lab for t in rec["turns"] for lab in t.get("labels") or []})
    rec["ms"] = round((time.perf_counter() - t0) * 1000, 3)
    return rec


def _record_fields(run: EpisodeRun, label: dict[str, Any], cut_episodes: str) -> dict[str, Any]:
    """What a rollout record keeps of a driven episode; its reward is the executor's (a cut
    episode's under ``cut_episodes``)."""
    out, turns = run.state, run.turns
    reward = episode_reward(run, label, cut_episodes)[1] if run.reward is not None else None
    tokens = [t["completion_tokens"] for t in turns if t.get("completion_tokens") is not None]
    return {
        "prompt": run.prompt,
        "text": run.text,
        "answer": out.get("answer"),
        "status": out.get("status"),
        "turns": turns,
        "policy_calls": out.get("policy_calls"),
        "search_rounds": out.get("search_rounds"),
        "subqueries": out.get("subqueries"),
        "passages": out.get("passages"),
        "search_errors": out.get("errors"),
        "completion_tokens": sum(tokens) if tokens else None,
        "reward": reward.to_dict() if reward else None,
        "cut": run.cut,
        "error": None,
        **(_token_fields(run.ledger) if run.ledger is not None else {}),
    }


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
    sft_refused_oracle: int = 0
    oracle: bool = False  # an oracle policy wrote the turns: accuracy is not measured
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
        self.oracle = self.oracle or "oracle" in (rec.get("labels") or [])
        r = rec.get("reward")
        if rec.get("error") or r is None:
            self.failures += 1
            message = str(rec.get("error") or "episode ended without a reward")
            kind = message.split(":", 1)[0]
            self.error_counts[kind] = self.error_counts.get(kind, 0) + 1
            self.first_errors.setdefault(kind, message)
            return
        self.rewards.append(r["total"])
        for part in REWARD_PARTS:
            self.parts.setdefault(part, []).append(r.get(part, 0.0))
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
            "oracle": self.oracle,
            "sft_written": self.sft_written,
            "sft_refused_oracle": self.sft_refused_oracle,
            "error_counts": dict(self.error_counts),
            "first_errors": dict(self.first_errors),
            "searches": self.searches,
            "failed_searches": self.failed_searches,
            "episodes_with_failed_searches": self.episodes_with_failed_searches,
        }

    def lines(self) -> list[str]:
        d = self.to_dict()
        parts = ", ".join(f"{k} {v}" for k, v in d["mean_parts"].items())
        oracle = " (oracle run: the gold answer was given, accuracy is not measured)" if self.oracle else ""
        out = [
            f"episodes {d['episodes']}, failures {d['failures']}, failed searches "
            f"{d['failed_searches']} of {d['searches']} (in {d['episodes_with_failed_searches']} episodes)",
            f"mean reward {d['mean_reward']} ({parts})",
            f"EM {'oracle' if self.oracle else d['em']}, format valid {d['format_valid_pct']}%{oracle}",
            f"decomposition ratio on {d['parallel_questions']} parallelizable questions: {d['decomposition_ratio_parallel']}",
            f"policy calls per episode {d['mean_policy_calls']}",
        ]
        if d["sft_written"]:
            out.append(f"SFT examples written {d['sft_written']}")
        if d["sft_refused_oracle"]:
            out.append(
                f"SFT: {d['sft_refused_oracle']} oracle episode(s) not written (--allow-oracle writes them)"
            )
        by_count = sorted(self.error_counts.items(), key=lambda kv: -kv[1])
        return out + [
            f"{n} episode(s) failed with {kind}; first: {self.first_errors[kind]}" for kind, n in by_count
        ]


#: the chat template the SFT export is trained with: the messages' texts concatenated, no role
#: markers, so the tokens are exactly the rollout's episode (prompt + turns + observations)
SFT_CHAT_TEMPLATE = "{% for m in messages %}{{ m['content'] }}{% endfor %}"
#: OpenRLHF 0.11.2 ``train_sft`` flags for :func:`sft_record`'s files: multi-turn mode trains on the
#: assistant messages only (``response_ranges``), so observations and the prompt carry no loss
SFT_FLAGS = (
    "--data.input_key messages --data.multiturn --data.apply_chat_template "
    f'--data.tokenizer_chat_template "{SFT_CHAT_TEMPLATE}"'
)
_ORACLE_THINK = re.compile(r"<think>\s*oracle:.*?</think>\s*", re.DOTALL)


def sft_record(rec: dict[str, Any]) -> dict[str, Any]:
    """One episode as an OpenRLHF multi-turn SFT example (``messages``, trained with :data:`SFT_FLAGS`).

    The prompt is the first (user) message, each policy turn an assistant message (the loss),
    each observation a user message (no loss); concatenated they are the episode's text. The
    oracle's ``<think>oracle: ...</think>`` notes are dropped: they describe the oracle, not a
    reasoning step a model should learn.
    """
    messages = [{"role": "user", "content": rec["prompt"]}]
    for turn in rec["turns"]:
        messages.append({"role": "assistant", "content": _ORACLE_THINK.sub("", turn["text"])})
        if turn.get("observation"):
            messages.append({"role": "user", "content": turn["observation"]})
    return {"messages": messages, "id": rec["id"]}


async def rollout(
    questions: Sequence[dict[str, Any]],
    env_graph: EnvGraph,
    policy: Any,
    out: str | Path,
    *,
    concurrency: int = 8,
    sft_out: str | Path | None = None,
    allow_oracle: bool = False,
    tokenizer: Any = None,
    replay: Replay | None = None,
    progress: bool = True,
) -> RolloutSummary:
    """Run every question (``concurrency`` at a time), writing each episode as it finishes.

    ``sft_out`` refuses the oracle policy's episodes (they answer with the gold answer, the
    data would teach copying a label that is absent at test time) unless ``allow_oracle``.
    """
    from tqdm.auto import tqdm

    if concurrency < 1:
        raise ValueError("concurrency must be >= 1")
    if sft_out and str(getattr(policy, "name", "")).partition(":")[0] == "oracle" and not allow_oracle:
        raise ValueError(
            f"--sft-out {sft_out}: the oracle policy answers with the gold answer, so its episodes are "
            "not SFT data for a model; use a model's rollouts, or --allow-oracle to write them anyway "
            "(e.g. to warm-start the format only)"
        )
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    summary = RolloutSummary()
    sem = asyncio.Semaphore(concurrency)

    async def one(q: dict[str, Any]) -> dict[str, Any]:
        async with sem:
            return await rollout_episode(env_graph, policy, q, tokenizer=tokenizer, replay=replay)

    with (
        out.open("w", encoding="utf-8") as f,
        open(sft_out, "w", encoding="utf-8") if sft_out else contextlib.nullcontext() as sft_f,
        tqdm(total=len(questions), disable=not progress, desc="rollout") as bar,
    ):
        for fut in asyncio.as_completed([one(q) for q in questions]):
            rec = await fut
            f.write(json.dumps(rec, ensure_ascii=False) + "\n")
            f.flush()
            summary.add(rec)
            if sft_f and rec.get("reward") and rec["reward"]["correct"]:
                if "oracle" in rec["labels"] and not allow_oracle:
                    summary.sft_refused_oracle += 1
                else:
                    sft_f.write(json.dumps(sft_record(rec), ensure_ascii=False) + "\n")
                    summary.sft_written += 1
            bar.update(1)
    return summary
