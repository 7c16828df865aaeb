"""How long a run trains: ``total_training_steps`` (the official script's setting) made into the
whole passes over the prompts that OpenRLHF 0.11.2 runs, and the warm-up that follows from them.

OpenRLHF has no step limit: a run is ``num_episodes`` passes over ``prompt_data``, a rollout step
per ``rollout_batch_size`` prompts, and its LR schedule spans ``max_steps`` optimizer steps
(prompts x samples per prompt // train batch x passes x epochs), warm-up a ratio of those.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any


def prompt_count(path: str) -> int | None:
    """The records of a local jsonl file (its non-empty lines), or None when it is not a local file."""
    p = Path(path)
    if not p.is_file():
        return None
    with p.open("rb") as f:
        return sum(1 for line in f if line.strip())


@dataclass(frozen=True)
class Schedule:
    """The passes a run makes and what they come to (``prompts`` None: the data could not be counted)."""

    episodes: int
    prompts: int | None = None
    steps_per_episode: int | None = None

    @property
    def steps(self) -> int | None:
        return None if self.steps_per_episode is None else self.steps_per_episode * self.episodes


def plan(cfg: Any) -> Schedule:
    """``cfg.num_episodes``, or with ``total_training_steps`` the number of whole passes whose steps
    come closest to it (at least one); the data is counted when ``prompt_data`` is a local file."""
    n = prompt_count(cfg.prompt_data)
    return Schedule(cfg.num_episodes) if n is None else passes(cfg, n)


def passes(cfg: Any, prompts: int) -> Schedule:
    """The schedule of a run over ``prompts`` prompts (``max_samples`` of them at most)."""
    n = min(prompts, cfg.max_samples) if cfg.max_samples else prompts
    per = max(1, math.ceil(n / cfg.rollout_batch_size))
    if cfg.total_training_steps is None:
        return Schedule(cfg.num_episodes, n, per)
    return Schedule(max(1, round(cfg.total_training_steps / per)), n, per)


def schedule_line(cfg: Any) -> str:
    """What ``train --check`` says of the run's length and warm-up."""
    s = plan(cfg)
    if s.steps is None or s.prompts is None:
        return (
            f"not checked: run length: prompt_data {cfg.prompt_data} is not a local file to count; "
            f"num_episodes {s.episodes}"
            + (
                f" (total_training_steps {cfg.total_training_steps} needs the count)"
                if cfg.total_training_steps
                else ""
            )
        )
    optimizer_steps = (
        s.prompts * cfg.n_samples_per_prompt // cfg.train_batch_size * s.episodes * cfg.max_epochs
    )
    warmup = math.ceil(optimizer_steps * cfg.actor_warmup_ratio)
    per_step = max(optimizer_steps / max(s.steps, 1), 1e-9)
    target = (
        f" for total_training_steps {cfg.total_training_steps} (OpenRLHF 0.11.2 runs whole passes)"
        if cfg.total_training_steps
        else ""
    )
    return (
        f"run length: {s.prompts} prompts, {s.steps_per_episode} rollout steps a pass x {s.episodes} passes = "
        f"{s.steps} steps{target}; actor warm-up {cfg.actor_warmup_ratio:g} x {optimizer_steps} optimizer steps "
        f"= {warmup} (about {warmup / per_step:.0f} rollout steps), then {cfg.lr_scheduler}"
    )
