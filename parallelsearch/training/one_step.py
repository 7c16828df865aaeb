"""``parallelsearch train --smoke``: one pass of what a training step runs, on this CPU, in minutes.

OpenRLHF's own rollout actor, built in-process, runs a few prompts of the tiny model on a real vLLM
CPU engine against a real ``/retrieve`` server, with the paper preset's agent config (its reward
mode, chat templating, no constrained decoding) and the user's ``--set`` on top. The model is first
fitted for a few steps on a teacher's episodes of those prompts and synced into the engine (a random
model never writes a valid search without constrained decoding). Each episode's reward terms and
token spans are printed with the action-mask check; then one training step of OpenRLHF's code (group
advantages, ``PolicyLoss``), the weights synced into the engine, and the sync check on fresh episodes
(docs/vllm.md, "CPU smoke"). ``--learn`` runs the learning smoke (:mod:`parallelsearch.training.learning_run`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from parallelsearch.training.rollouts import parts_said


@dataclass
class SmokeEpisode:
    """One episode as OpenRLHF's experience holds it, with the spans of each kind and the mask check."""

    question: str
    reward: float
    terms: dict[str, float]
    prompt_tokens: int
    action_tokens: int
    observation_tokens: int
    turns: int
    mask: str  # "ok", or why OpenRLHF's action_mask disagrees with the engine's turns
    truncated: bool
    pieces: list[tuple[str, str]] = field(default_factory=list)  # (kind, text) in order

    @property
    def mask_ok(self) -> bool:
        return self.mask == "ok"


@dataclass
class SmokeResult:
    """What ``train --smoke`` showed, and whether every check it prints held (its exit status)."""

    episodes: list[SmokeEpisode]
    loss: float
    grad_norm: float
    params_changed: int
    groups_with_signal: int  # prompts whose samples did not all score alike
    sync: Any  # SyncCheck after the step, or None when constrained decoding makes it meaningless
    unsynced: Any  # SyncCheck of the fitted actor before its first sync (must fail)
    seconds: dict[str, float]
    #: action-mask failures of the episodes not printed (the teacher's, the sync check's)
    other_mask_failures: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        import math

        from parallelsearch.training.checks import SYNC_TOLERANCE

        synced = self.sync is None or (self.sync.ok(SYNC_TOLERANCE) and self.unsynced.gap > SYNC_TOLERANCE)
        masks = all(ep.mask_ok for ep in self.episodes) and not self.other_mask_failures
        return masks and math.isfinite(self.loss) and synced


def episode_view(result: dict[str, Any], experience: Any, tokenizer: Any, question: str) -> SmokeEpisode:
    """What the trainer gets for one episode: reward terms, each span, and the action-mask check against
    the engine's recorded turns (:func:`parallelsearch.training.checks.check_action_mask`)."""
    from parallelsearch.rl.episode import decode_tokens
    from parallelsearch.training.checks import check_action_mask

    seq = experience.sequences[0].tolist()
    mc = check_action_mask(seq, experience.action_mask[0].tolist(), result["engine_turns"], tokenizer)
    turns = result["engine_turns"]
    n = len(seq)  # a turn past max_len is cut from the sequence: count only what it holds
    spans = [(min(len(t.prompt_ids), n), min(len(t.prompt_ids) + len(t.ids), n)) for t in turns]
    prompt_len = spans[0][0] if spans else len(seq)
    bounds = [*spans, (len(seq), len(seq))]
    pieces = []
    for (a, b), (nxt, _) in zip(spans, bounds[1:], strict=True):
        pieces.append(("action", decode_tokens(tokenizer, seq[a:b])))
        if nxt > b:
            pieces.append(("observation", decode_tokens(tokenizer, seq[b:nxt])))
    return SmokeEpisode(
        question=question,
        reward=float(result["reward"]),
        terms={k: round(float(v), 4) for k, v in result["extra_logs"].items()},
        prompt_tokens=prompt_len,
        action_tokens=sum(b - a for a, b in spans),
        observation_tokens=len(seq) - prompt_len - sum(b - a for a, b in spans),
        turns=len(spans),
        mask=mc.reason,
        truncated=bool(result["truncated"]),
        pieces=pieces,
    )


def format_episode(i: int, ep: SmokeEpisode, width: int = 110) -> list[str]:
    t = ep.terms
    lines = [
        f"episode {i}: {ep.question}",
        f"  reward {ep.reward:.3f} = {parts_said(t, 'g', ' + ')}"
        f"  (format_valid {t['format_valid']:g}, search_rounds {t['search_rounds']:g}, "
        f"subqueries {t['subqueries']:g}, search_errors {t['search_errors']:g})",
        f"  tokens: prompt {ep.prompt_tokens} (masked), action {ep.action_tokens} in {ep.turns} turn(s) "
        f"(trained), observation {ep.observation_tokens} (masked){', truncated' if ep.truncated else ''}; "
        f"action_mask == the engine's turns: {'yes' if ep.mask_ok else 'NO (' + ep.mask + ')'}",
    ]
    for kind, text in ep.pieces:
        # newlines and control bytes escaped
        shown = "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
        shown = shown if len(shown) <= width else shown[: width - 3] + "..."
        mark = "+ action     " if kind == "action" else "- observation"
        lines.append(f"  {mark} | {shown}")
    return lines


def show_episodes(
    results: list[dict[str, Any]],
    samples: list[Any],
    records: list[dict[str, Any]],
    tokenizer: Any,
    echo: Callable[[str], None],
) -> list[SmokeEpisode]:
    """Each episode's view (:func:`episode_view`), printed."""
    episodes = [
        episode_view(r, e, tokenizer, rec["question"])
        for r, e, rec in zip(results, samples, records, strict=True)
    ]
    for i, ep in enumerate(episodes):
        for line in format_episode(i + 1, ep):
            echo(line)
    return episodes


def actor_log_probs(model_dir: Path, experiences: list[Any]) -> tuple[Any, Any, Any]:
    """OpenRLHF's ``Actor`` over ``model_dir`` (fp32, training mode), the experiences as one
    batch, and the actor's log-probs of that batch's sequences."""
    from parallelsearch.rl.openrlhf_cpu import import_openrlhf_models

    models = import_openrlhf_models()
    from openrlhf.trainer.ppo_utils.experience import Experience

    for i, e in enumerate(experiences):
        e.index = [i]
    batch = Experience.concat_experiences(experiences, pad_token_id=0)
    actor = models.Actor(str(model_dir), attn_implementation="sdpa", param_dtype="bf16")
    actor.model.float()
    actor.train()
    log_probs = actor(batch.sequences, action_mask=batch.action_mask, attention_mask=batch.attention_mask)
    return actor, batch, log_probs


#: SFT steps of the smoke's warm start on its own prompts' teacher episodes (enough for valid searches)
SMOKE_SFT_STEPS = 100
#: the same for a real model, which already writes text: enough to see the loss fall
REAL_MODEL_SMOKE_SFT_STEPS = 10


async def _smoke(prompts: int, session_kwargs: dict[str, Any], echo: Callable[[str], None]) -> SmokeResult:
    """One step as training takes it, each part printed with the evidence that it did what it says:
    the warm start, the episodes with their masks, the step, the sync and its check."""
    from parallelsearch.data import load_questions
    from parallelsearch.demo_data import HOTPOTQA_SAMPLE
    from parallelsearch.training.learning_loop import REAL_MODEL_LEARN, LearningRun, LearnSettings
    from parallelsearch.training.learning_run import warm_start
    from parallelsearch.training.session import smoke_session
    from parallelsearch.training.trainer import CpuTrainer

    questions = load_questions(HOTPOTQA_SAMPLE)[:prompts]
    async with smoke_session(questions, store_questions=prompts, echo=echo, **session_kwargs) as smoke:
        n, tok = smoke.args.rollout.n_samples_per_prompt, smoke.tokenizer
        settings = LearnSettings(sft_steps=SMOKE_SFT_STEPS, sync_check=smoke.sync_checkable)
        if session_kwargs.get("model"):  # a real model: its SFT settings, a few steps (the format, not a fit)
            real = {k: REAL_MODEL_LEARN[k] for k in ("sft_lr", "sft_batch", "train_layers")}
            settings = dataclasses.replace(settings, sft_steps=REAL_MODEL_SMOKE_SFT_STEPS, **real)
        trainer = CpuTrainer(smoke.model_dir, smoke.args, tok, train_layers=settings.train_layers)
        run = LearningRun(smoke.actor, trainer, smoke.records, smoke.records, settings, echo)
        await warm_start(run, questions, smoke)
        records = [r for r in smoke.records for _ in range(n)]
        t0 = time.perf_counter()
        results = await run.rollout(records, range(len(records)))
        smoke.seconds["rollout"] = time.perf_counter() - t0
        samples = trainer.samples(results)
        episodes = show_episodes(results, samples, records, tok, echo)
        t0 = time.perf_counter()
        stats = trainer.train(trainer.make_experiences(samples), seed=0)
        await trainer.sync(smoke.actor)
        smoke.seconds["train_step"] = time.perf_counter() - t0
        groups = [{ep.reward for ep in episodes[i : i + n]} for i in range(0, len(episodes), n)]
        signal = sum(len(g) > 1 for g in groups)
        echo(step_line(stats, signal, len(groups), smoke.args.algo.advantage.estimator))
        sync = None
        if smoke.sync_checkable:
            t0 = time.perf_counter()
            await run.evaluate("after_step", label="sync check on fresh episodes,")
            smoke.seconds["sync_check"] = time.perf_counter() - t0
            sync = run.state.sync_checks["after_step"]
        phases = {**smoke.seconds, **run.state.seconds}
        phases.pop("eval_after_step", None)  # the sync check's own
        echo("timings: " + ", ".join(f"{k} {v:.1f} s" for k, v in phases.items()))
        return SmokeResult(
            episodes, stats.policy_loss, stats.grad_norm, stats.parameters_changed, signal, sync,
            run.state.unsynced, smoke.seconds, list(run.state.mask_failures),
        )  # fmt: skip


def step_line(stats: Any, signal: int, groups: int, estimator: str) -> str:
    return (
        f"training step ({estimator} advantages; {signal} of {groups} prompt(s) whose samples scored "
        f"differently, the others teach nothing): PolicyLoss {stats.policy_loss:+.6f}, grad norm "
        f"{stats.grad_norm:.4f}, {stats.parameters_changed} parameter tensors changed, advantage-weighted "
        f"log-prob change {stats.advantage_weighted_change:+.4f}; weights synced"
    )


def run_smoke(
    *,
    prompts: int = 2,
    samples: int | None = None,
    overrides: Sequence[str] = (),
    engine_args: dict[str, Any] | None = None,
    retriever_url: str | None = None,
    workdir: str | Path | None = None,
    model: str | None = None,
    echo: Callable[[str], None] = print,
) -> SmokeResult:
    """Build the tiny model (or resolve ``model``), warm-start it on the teacher's episodes of the ``prompts`` questions, roll out
    ``prompts`` x ``samples`` episodes (the config's ``n_samples_per_prompt`` unless given), take one
    training step, sync, check.

    The model and configs go to ``workdir`` (kept), else to a temporary folder (deleted)."""
    if prompts < 1 or (samples is not None and samples < 1):
        raise ValueError("--smoke-prompts and --smoke-samples must be >= 1")
    extra = [*overrides, *([f"n_samples_per_prompt={samples}"] if samples else [])]
    kwargs = {
        "overrides": extra,
        "engine_args": engine_args,
        "retriever_url": retriever_url,
        "workdir": workdir,
        "model": model,
    }
    return asyncio.run(_smoke(prompts, kwargs, echo))
