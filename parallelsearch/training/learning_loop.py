"""``parallelsearch train --smoke --learn``: a training run on this CPU whose held-out reward rises.

The loop is OpenRLHF's, on one process (docs/training.md, "The learning smoke"): the rollout actor
runs this project's executor on the vLLM CPU engine against the real retriever; experiences and
group advantages come from OpenRLHF's functions; ``PolicyLoss`` steps train its ``Actor``; the
weights are synced into the engine after every step. Around it: the tiny model fitted on a teacher's
episodes of both plans (:mod:`parallelsearch.training.teacher`), a held-out evaluation before and after,
a control run from the same start with the same seeds whose rewards are shuffled within each step
(no learning signal), the action-mask and weight-sync checks (:mod:`parallelsearch.training.checks`),
and ``learning.json`` with a plot.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from parallelsearch.training.rollouts import Evaluation, evaluation, parts_said, rollouts, term_means

#: episodes a batch in the sync and anchor checks' forward passes (their logits are held at once)
CHECK_CHUNK = 16

#: the question types the learning smoke trains and evaluates on, by name (docs/training.md, "The learning
#: smoke": why parallelizable questions by default)
POOLS = {"parallel": ("comparison",), "all": ("comparison", "bridge")}


#: the gateway's counters the learning record sums over every episode
GATEWAY_KEYS = (
    "gateway_forks",
    "gateway_retokenized",
    "gateway_failed_closed",
    "gateway_prompt_drifts",
    "gateway_untrained_turns",
    "gateway_stuck",
)


@dataclass
class LearnSettings:
    """The learning run's own knobs (the training ones are the config's: ``--set``)."""

    steps: int = 20  # 0: the warm start alone (zero-shot and after-SFT evaluations, no RL, no control)
    heldout: int = 24  # held-out questions: two of every eight of the pool
    heldout_samples: int = 6
    questions: int = 200  # the first N of the shipped sample: the store, and the pool drawn from them
    pool: str = "parallel"
    seed: int = 0
    sft_steps: int = 150  # 0: no warm start, the model as given is the start (a saved warm start)
    sft_lr: float = 1e-2
    sft_batch: int = 16
    #: a real model to train instead of the tiny one (``--model``: a packaged name, a GGUF file or a
    #: Hugging Face folder); it is also evaluated zero-shot, before its warm start
    model: str | None = None
    #: train only the top N transformer layers (and the final norm), the rest frozen: on a CPU the
    #: backward pass then stops N layers down; None trains every weight
    train_layers: int | None = None
    control: bool = True
    #: how the control shuffles a step's rewards: among each prompt's samples ("group": the run's own
    #: advantages, each group's, given to random episodes of the group) or among all the step's samples
    #: ("step": every group gets rewards of other prompts, so nearly every group has advantages)
    control_shuffle: str = "step"
    #: the held-out episodes' sampling temperature (None: the rollouts'); 0 is greedy, as the paper
    #: evaluates, and then one episode a question (``heldout_samples`` 1) says all there is
    eval_temperature: float | None = None
    #: held-out episodes at a time: 1 makes each evaluation independent of batching, so a rerun of
    #: the same seed repeats it to the last digit
    eval_concurrency: int = 1
    #: compare the engine's log-probs with the actor's (off where the session is not
    #: ``sync_checkable``)
    sync_check: bool = True
    #: save the actor after the warm start and after the run as Hugging Face folders
    #: (``checkpoints/warm_start``, ``checkpoints/after`` in the run folder): ``--policy vllm:FOLDER``
    save_checkpoints: bool = False

    def check(self) -> LearnSettings:
        if self.steps < 0:
            raise ValueError(f"--smoke-steps must be >= 0 (0: the warm start alone), got {self.steps}")
        if self.sft_steps < 0:
            raise ValueError(f"--smoke-sft-steps must be >= 0 (0: no warm start), got {self.sft_steps}")
        for name in ("heldout", "heldout_samples", "questions", "sft_batch"):
            if getattr(self, name) < 1:
                flag = "--smoke-heldout" if name == "heldout" else f"LearnSettings.{name}"
                raise ValueError(f"{flag} must be >= 1, got {getattr(self, name)}")
        if self.questions > 200:
            raise ValueError(f"LearnSettings.questions={self.questions}: the shipped sample holds 200")
        if self.control_shuffle not in ("group", "step"):
            raise ValueError(f"control_shuffle {self.control_shuffle!r}: group or step")
        if self.pool not in POOLS:
            raise ValueError(f"pool {self.pool!r}: one of {', '.join(POOLS)}")
        if self.eval_temperature is not None and self.eval_temperature < 0:
            raise ValueError(f"LearnSettings.eval_temperature must be >= 0, got {self.eval_temperature}")
        if self.train_layers is not None and self.train_layers < 1:
            raise ValueError(f"--smoke-train-layers must be >= 1, got {self.train_layers}")
        return self


#: the learning run's own knobs for a real model (docs/training.md, "A real model on a laptop"): an SFT
#: learning rate for 135M parameters, fewer and smaller SFT batches, the top layers trained, held-out
#: episodes batched in the engine (one at a time would take most of the run) and greedy, one a question
REAL_MODEL_LEARN: dict[str, Any] = {
    "sft_steps": 60,
    "sft_lr": 1e-4,
    "sft_batch": 8,
    "train_layers": 8,
    "steps": 15,
    "eval_concurrency": 16,
    "eval_temperature": 0.0,
    "heldout_samples": 1,
}


def split_questions(
    questions: Sequence[dict[str, Any]], heldout: int, pool: str = "parallel"
) -> tuple[list[dict], list[dict]]:
    """(training, held-out) of the ``pool``'s questions: two of every eight are held out (the first
    ``heldout`` of them kept), the rest train; no held-out question is ever trained on."""
    types = POOLS[pool]
    kept = [q for q in questions if (q.get("metadata") or {}).get("type") in types]
    candidates = [q for i, q in enumerate(kept) if i % 8 < 2]
    if heldout > len(candidates):
        raise ValueError(
            f"--smoke-heldout {heldout}: the pool {pool!r} of these {len(questions)} questions holds "
            f"{len(candidates)} held-out questions"
        )
    held = candidates[:heldout]
    return [q for i, q in enumerate(kept) if i % 8 >= 2], held


@dataclass
class SyncCheck:
    """The engine's log-probs against the actor's after a sync, and the same with the mask shifted."""

    gap: float
    shifted_gap: float
    episodes: int

    def ok(self, tolerance: float) -> bool:
        return self.gap <= tolerance < self.shifted_gap


@dataclass
class LearnState:
    """What the run gathers as it goes (written out as ``learning.json``)."""

    steps: list[dict[str, Any]] = field(default_factory=list)
    control_steps: list[dict[str, Any]] = field(default_factory=list)
    evaluations: dict[str, Evaluation] = field(default_factory=dict)
    sync_checks: dict[str, SyncCheck] = field(default_factory=dict)
    unsynced: SyncCheck | None = None  # the check on an actor whose weights the engine does not hold
    mask_failures: list[str] = field(default_factory=list)
    mask_checked: int = 0
    token_mismatches: int = 0  # sample ids that differ from the engine's recorded calls, every episode
    gateway: dict[str, float] = field(default_factory=dict)  # the gateway's counters, summed (gateway mode)
    seconds: dict[str, float] = field(default_factory=dict)
    #: mean log-prob per action token of the "before" evaluation's episodes under the weights of each
    #: later evaluation: how far a run moved from what the warm start does (the control's drift)
    anchor_logprob: dict[str, float] = field(default_factory=dict)
    #: the first training episode's token ids as the trainer holds them, decoded: what the model is
    #: trained on, prompt and all (a user's middleware shows here as the chat template rendered it)
    first_trained_episode: str = ""
    #: the saved actors (``save_checkpoints``): phase -> Hugging Face folder
    checkpoints: dict[str, str] = field(default_factory=dict)


class LearningRun:
    """The rollout actor, the trainer and the prompts of one learning run, and its phases."""

    def __init__(
        self,
        actor: Any,
        trainer: Any,
        train: list[dict[str, Any]],
        heldout: list[dict[str, Any]],
        settings: LearnSettings,
        echo: Callable[[str], None] = print,
    ) -> None:
        self.actor, self.trainer, self.train_records, self.heldout = actor, trainer, train, heldout
        self.settings = settings
        self.echo = echo
        self.args = trainer.args
        self.state = LearnState()

    async def rollout(
        self,
        records: Sequence[dict[str, Any]],
        seeds: Sequence[int],
        concurrency: int | None = None,
        temperature: float | None = None,
    ) -> list[dict[str, Any]]:
        results = await rollouts(
            self.actor,
            records,
            seeds,
            max_length=self.args.data.max_len,
            tokenizer=self.trainer.tokenizer,
            temperature=self.args.rollout.temperature if temperature is None else temperature,
            top_p=self.args.rollout.top_p,
            concurrency=concurrency,
        )
        self.check_masks(results)
        return results

    def check_masks(self, results: Sequence[dict[str, Any]]) -> None:
        """The action-mask check on every episode (failures kept, not raised: the run reports them)."""
        from parallelsearch.training.checks import check_sample

        for r, e in zip(results, self.trainer.samples(results), strict=True):
            seq = e.sequences[0].tolist()
            self.state.mask_checked += 1
            for key in GATEWAY_KEYS:
                if key in r["extra_logs"]:
                    self.state.gateway[key] = self.state.gateway.get(key, 0.0) + float(r["extra_logs"][key])
            failed = bool(float(r["extra_logs"].get("gateway_failed_closed", 0.0)))
            reason, bad = check_sample(
                seq,
                e.action_mask[0].tolist(),
                r["engine_turns"],
                self.trainer.tokenizer,
                failed_closed=failed,
            )
            self.state.token_mismatches += bad
            if reason is not None:
                self.state.mask_failures.append(reason)

    async def evaluate(self, name: str, label: str = "held-out") -> Evaluation:
        """The held-out prompts, ``heldout_samples`` seeded episodes each, with the weights the engine holds;
        the sync check on the same episodes."""
        t0 = time.perf_counter()
        n = self.settings.heldout_samples
        records = [r for r in self.heldout for _ in range(n)]
        results = await self.rollout(
            records,
            self.seeds(0, len(records)),
            self.settings.eval_concurrency,
            self.settings.eval_temperature,
        )
        ev = evaluation(results, [r["type"] for r in records])
        self.state.evaluations[name] = ev
        self.anchor = results if name == "before" else getattr(self, "anchor", results)
        self.state.anchor_logprob[name] = self.anchor_logprob()
        sync = ""
        if self.settings.sync_check:
            sc = self.state.sync_checks[name] = self.sync_check(results)
            sync = f"; |engine - actor| log-prob {sc.gap:.2e} (shifted mask {sc.shifted_gap:.2f})"
        self.state.seconds[f"eval_{name}"] = round(time.perf_counter() - t0, 1)
        self.echo(
            f"{label} {name}: mean reward {ev.mean:.3f} +- {ev.stderr:.3f} ({ev.episodes} episodes; "
            + ", ".join(f"{c} {v['reward']:.3f}" for c, v in ev.by_class.items())
            + ")"
            + sync
        )
        return ev

    def save(self, folder: Path) -> None:
        """The actor as it is now, as a Hugging Face folder named in the record by its phase."""
        t0 = time.perf_counter()
        self.state.checkpoints[folder.name] = str(self.trainer.save(folder))
        self.echo(f"saved the {folder.name} checkpoint to {folder} ({time.perf_counter() - t0:.1f} s)")

    def anchor_logprob(self) -> float:
        """The actor's mean log-prob per action token of the "before" evaluation's episodes."""
        total = tokens = 0.0
        for batch in self.batches(self.anchor):
            total += float((self.trainer.log_probs(batch) * batch.action_mask).sum())
            tokens += float(batch.action_mask.sum())
        return round(total / tokens, 4)

    def batches(self, results: Sequence[dict[str, Any]]) -> Iterator[Any]:
        """``results`` as the trainer's experiences, ``CHECK_CHUNK`` episodes a batch: one batch of a
        whole evaluation held all its logits at once (gigabytes for 144 episodes)."""
        from openrlhf.trainer.ppo_utils.experience import Experience

        samples = self.trainer.samples(results)
        for i in range(0, len(samples), CHECK_CHUNK):
            yield Experience.concat_experiences(
                samples[i : i + CHECK_CHUNK], self.trainer.tokenizer.pad_token_id
            )

    async def check_unsynced(self, episodes: int = 8) -> SyncCheck:
        """The sync check while the actor's weights differ from the engine's (before a sync): it must
        fail, or it could not catch a missing sync."""
        records = [r for r in self.heldout for _ in range(self.settings.heldout_samples)][:episodes]
        self.state.unsynced = self.sync_check(await self.rollout(records, self.seeds(0, len(records))))
        return self.state.unsynced

    def seeds(self, step: int, episodes: int) -> list[int]:
        """The sampling seeds of one step's episodes (step 0: every evaluation), from the run's seed: a run
        and its control, and every evaluation, sample with the same random numbers."""
        return [(self.settings.seed * 1_000 + step) * 100_000 + i for i in range(episodes)]

    def sync_check(self, results: Sequence[dict[str, Any]]) -> SyncCheck:
        """The actor's log-probs of ``results``' action tokens against the engine's, and the same
        with the mask shifted by one: a check that cannot fail proves nothing. One forward pass a
        batch gives every position's log-prob, read under both masks."""
        import torch

        from parallelsearch.training.checks import logprob_gap, shifted

        read: dict[str, tuple[list[Any], list[Any]]] = {"actions": ([], []), "shifted": ([], [])}
        for batch in self.batches(results):
            every = self.trainer.log_probs(batch, action_mask=torch.ones_like(batch.action_mask)).detach()
            for name, mask in (("actions", batch.action_mask), ("shifted", shifted(batch.action_mask))):
                read[name][0].append(every[mask.bool()])
                read[name][1].append(batch.rollout_log_probs[mask.bool()])
        gap, off = (
            logprob_gap(torch.cat(a), torch.cat(e), torch.ones(sum(map(len, a)))) for a, e in read.values()
        )
        return SyncCheck(gap, off, len(results))

    async def train(self, *, control: bool) -> list[dict[str, Any]]:
        """``steps`` RL steps; with ``control`` the rewards are shuffled within each step before the
        advantages (same prompts, same seeds, no learning signal)."""
        if not self.train_records:
            raise ValueError("no training questions: the pool holds only held-out ones")
        out = []
        n = self.args.rollout.n_samples_per_prompt
        per_step = self.args.rollout.batch_size
        order = random.Random(self.settings.seed)
        pool: list[dict[str, Any]] = []
        history: list[Any] = []
        start = {n: p.detach().clone() for n, p in self.trainer.actor.named_parameters()}
        for step in range(1, self.settings.steps + 1):
            t0 = time.perf_counter()
            while len(pool) < per_step:
                pool += order.sample(self.train_records, len(self.train_records))
            prompts, pool = pool[:per_step], pool[per_step:]
            records = [p for p in prompts for _ in range(n)]
            results = await self.rollout(records, self.seeds(step, len(records)))
            samples = self.trainer.samples(results)
            if not self.state.first_trained_episode:
                self.state.first_trained_episode = self.trainer.tokenizer.decode(
                    samples[0].sequences[0].tolist()
                )
            if control:
                group = n if self.settings.control_shuffle == "group" else len(samples)
                shuffle_rewards(samples, random.Random(self.settings.seed * 7919 + step), group)
            stats = self.trainer.train(self.trainer.make_experiences(samples), seed=self.settings.seed + step)
            await self.trainer.sync(self.actor)
            row = {
                "step": step,
                **term_means(results),
                **vars(stats),
                "weight_distance": round(distance(self.trainer.actor, start), 5),
                "seconds": round(time.perf_counter() - t0, 1),
            }
            out.append(row)
            self.echo(format_step(row, self.settings.steps, control))
            row["health"] = self.health(results, step, history)
        return out

    def health(self, results: Sequence[dict[str, Any]], step: int, history: list[Any]) -> dict[str, Any]:
        """The step's health line and its alarms (rl/health.py), as a training run's ``train-health``
        prints them; ``history`` holds the run's earlier steps."""
        from parallelsearch.rl.health import episode_health, step_health, with_alarms

        history.append(step_health([episode_health(r) for r in results], step))
        now = with_alarms(history)[-1]
        self.echo("  " + now.line())
        for alarm in now.alarms:
            self.echo(f"  ALARM {alarm}")
        return now.to_dict()


def distance(actor: Any, start: dict[str, Any]) -> float:
    """The L2 distance of ``actor``'s parameters from ``start`` (a directed run moves about linearly in
    its steps, a random walk about as their square root)."""
    return math.sqrt(sum(float(((p.detach() - start[n]) ** 2).sum()) for n, p in actor.named_parameters()))


def shuffle_rewards(samples: list[Any], rng: random.Random, group: int | None = None) -> None:
    """Permute the samples' rewards among each run of ``group`` consecutive samples (a prompt's, as the
    samples are prompt-major; None: all of them): the control, where rewards no longer belong to their
    episodes."""
    size = group or len(samples)
    for start in range(0, len(samples), size):
        chunk = samples[start : start + size]
        rewards = [s.rewards.clone() for s in chunk]
        rng.shuffle(rewards)
        for s, r in zip(chunk, rewards, strict=True):
            s.rewards = r


def format_step(row: dict[str, Any], steps: int, control: bool) -> str:
    name = "control step" if control else "step"
    return (
        f"{name} {row['step']}/{steps}: reward {row['reward']:.3f} ({parts_said(row, '.2f')}; "
        f"decomposed {row['decomposed']:.2f}, search rounds {row['search_rounds']:.2f}), "
        f"policy loss {row['policy_loss']:+.4f}, grad norm {row['grad_norm']:.3f}, clip {row['ppo_clip_ratio']:.3f}, "
        f"advantage-weighted log-prob change {row['advantage_weighted_change']:+.4f}, "
        f"{row['seconds']:.1f} s"
    )


def rise(before: Evaluation, after: Evaluation) -> tuple[float, float]:
    """The rise of the mean and its standard error (before and after sampled apart: the errors add)."""
    return round(after.mean - before.mean, 4), round(math.hypot(before.stderr, after.stderr), 4)
