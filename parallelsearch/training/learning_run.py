"""``parallelsearch train --smoke --learn`` (``make smoke-learn``): the learning smoke, start to end.

Phases, in order (docs/training.md, "The learning smoke"): the session (tiny model, retriever, config,
rollout actor); the warm start (the teacher's episodes, SFT, the weights synced into the engine); the
held-out evaluation; the training steps; the held-out evaluation again; then the control from the same
warm start; ``learning.json`` and ``learning.svg`` in the run folder.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from parallelsearch.training.learning_loop import LearningRun, LearnSettings, split_questions


def config_summary(cfg: Any, args: Any) -> dict[str, Any]:
    """The settings that shaped the run, as ``learning.json`` records them."""
    return {
        "mode": cfg.agent.mode,
        "reward_mode": cfg.agent.reward.mode,
        "apply_chat_template": cfg.apply_chat_template,
        "prompt_template": cfg.agent.graph_config.prompt_template,
        "constrained": cfg.agent.constrained,
        "graph": cfg.agent.graph,
        "max_turns": cfg.agent.graph_config.max_turns,
        "top_k": cfg.agent.graph_config.top_k,
        "max_observation_words": cfg.agent.graph_config.max_observation_words,
        "advantage_estimator": args.algo.advantage.estimator,
        "n_samples_per_prompt": args.rollout.n_samples_per_prompt,
        "prompts_per_step": args.rollout.batch_size,
        "train_batch_size": args.train.batch_size,
        "micro_train_batch_size": args.train.micro_batch_size,
        "actor_lr": args.actor.adam.lr,
        "eps_clip_low_high": list(args.actor.eps_clip_low_high),
        "temperature": args.rollout.temperature,
        "max_len": args.data.max_len,
    }


async def warm_start(run: LearningRun, questions: Sequence[dict[str, Any]], smoke: Any) -> list[float]:
    """The teacher's episodes of both plans for the training questions, the SFT steps, the weights
    synced into the engine; returns the SFT losses."""
    from parallelsearch.rl.openrlhf_cpu import samples_generator_params
    from parallelsearch.training.teacher import demonstrations, fit

    if not run.settings.sft_steps:  # the model as given is the start (a saved warm start, say)
        run.echo("warm start: none (0 SFT steps): the model as given is the start")
        return []
    t0 = time.perf_counter()
    demos = await demonstrations(
        smoke.actor.executor,
        questions,
        run.train_records,
        samples_generator_params(),
        smoke.args.data.max_len,
        smoke.tokenizer,
        form="tools" if smoke.cfg.agent.mode == "gateway" else "tags",
        concurrency=1,  # each search alone: the demonstrations' passages never depend on batching
    )
    run.check_masks(demos)
    run.state.seconds["teacher_episodes"] = round(time.perf_counter() - t0, 1)
    s = run.settings
    run.echo(
        f"warm start: {len(demos)} teacher episodes (both plans of {len(questions)} training questions); "
        f"{s.sft_steps} SFT steps"
    )
    t0 = time.perf_counter()
    losses = fit(
        run.trainer,
        demos,
        steps=s.sft_steps,
        batch=s.sft_batch,
        lr=s.sft_lr,
        seed=s.seed,
        progress=lambda i, loss: run.echo(f"  SFT step {i}/{s.sft_steps}: loss {loss:.3f}"),
    )
    run.state.seconds["sft"] = round(time.perf_counter() - t0, 1)
    unsynced = await run.check_unsynced() if s.sync_check else None
    await run.trainer.sync(smoke.actor)
    before = (
        f"before the sync the engine's log-probs differ from the actor's by {unsynced.gap:.2f} nats; "
        if unsynced
        else ""
    )
    run.echo(
        f"warm start: SFT loss {losses[0]:.2f} -> {losses[-1]:.2f}; {before}weights synced into the engine"
    )
    return losses


async def train_and_control(run: LearningRun, rollout_actor: Any, save: Callable[[str], Any] | None) -> None:
    """The RL steps from the warm start and the evaluation after them; then, with a control, the same
    steps from the same start with each step's rewards shuffled, and its evaluations."""
    trainer = run.trainer
    start = trainer.weights()
    trainer.anchor(start)  # the reference of the KL term: the warm start, for the run and its control
    run.state.steps = await run.train(control=False)
    await run.evaluate("after")
    if save:
        save("after")
    if run.settings.control:
        trainer.restore(start)
        await trainer.sync(rollout_actor)
        await run.evaluate("control_before")
        run.state.control_steps = await run.train(control=True)
        await run.evaluate("control_after")


async def learning_smoke(
    settings: LearnSettings, session_kwargs: dict[str, Any], echo: Callable[[str], None]
) -> tuple[dict[str, Any], Path]:
    """The run, its held-out evaluations before and after, the control from the same start, and
    ``learning.json`` with its plot: each phase in the order docs/training.md gives."""
    from parallelsearch.data import load_questions
    from parallelsearch.demo_data import HOTPOTQA_SAMPLE
    from parallelsearch.training.plot import write_plot
    from parallelsearch.training.report import learning_record, summary_lines, write_record
    from parallelsearch.training.session import smoke_session
    from parallelsearch.training.trainer import CpuTrainer

    t_start = time.perf_counter()
    train_q, held_q = split_questions(
        load_questions(HOTPOTQA_SAMPLE)[: settings.questions], settings.heldout, settings.pool
    )
    async with smoke_session(
        train_q + held_q,
        store_questions=settings.questions,
        model=settings.model,
        echo=echo,
        **session_kwargs,
    ) as smoke:
        settings = dataclasses.replace(settings, sync_check=settings.sync_check and smoke.sync_checkable)
        trainer = CpuTrainer(smoke.model_dir, smoke.args, smoke.tokenizer, train_layers=settings.train_layers)
        recs = smoke.records
        run = LearningRun(smoke.actor, trainer, recs[: len(train_q)], recs[len(train_q) :], settings, echo)
        run.state.seconds.update({k: round(v, 1) for k, v in smoke.seconds.items()})
        if settings.model and settings.sft_steps:
            await run.evaluate("zero_shot")  # the pretrained model as it comes, before its warm start
        await warm_start(run, train_q, smoke)
        save = (
            (lambda name: run.save(smoke.work / "checkpoints" / name)) if settings.save_checkpoints else None
        )
        if save and settings.sft_steps:
            save("warm_start")
        await run.evaluate("before")
        if settings.steps:
            await train_and_control(run, smoke.actor, save)
        run.state.seconds["total"] = round(time.perf_counter() - t_start, 1)
        record = learning_record(run.state, settings, config_summary(smoke.cfg, smoke.args))
        path = write_record(record, smoke.work)
        write_plot(record, smoke.work / "learning.svg")
        for line in summary_lines(record):
            echo(line)
        echo(f"wrote {path} and {smoke.work / 'learning.svg'}")
    return record, path


def run_learning_smoke(
    settings: LearnSettings,
    *,
    overrides: Sequence[str] = (),
    engine_args: dict[str, Any] | None = None,
    retriever_url: str | None = None,
    workdir: str | Path,
    echo: Callable[[str], None] = print,
) -> dict[str, Any]:
    """The learning smoke; ``learning.json`` and ``learning.svg`` land in ``workdir``; returns the record."""
    session_kwargs = {
        "overrides": overrides,
        "engine_args": engine_args,
        "retriever_url": retriever_url,
        "workdir": workdir,
    }
    record, _ = asyncio.run(learning_smoke(settings.check(), session_kwargs, echo))
    return record
