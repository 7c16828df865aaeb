"""How long a run trains: ``total_training_steps`` (the official script's setting) made into the
whole passes over the prompts that OpenRLHF 0.11.2 runs, and the warm-up that follows from them.

OpenRLHF has no step limit: a run is ``num_episodes`` passes over ``prompt_data``, a rollout step
per ``rollout_batch_size`` prompts, and its LR schedule spans ``max_steps`` optimizer steps
(prompts x samples per prompt // train batch x passes x epochs), warm-up a ratio of those.

The schedule is computed once, on the file the job ships (:func:`plan`), and handed to whatever
states it: the command's ``--train.num_episodes``, the check's ``run length`` line and the
warm-up it prints. A file that cannot be counted here (a hub dataset name, a folder, a format
without a row count) has no schedule unless ``num_episodes`` is given.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: passes over the prompts past which the check warns: each prompt is trained on that many times
MAX_PASSES = 50


def prompt_count(path: str | Path) -> int | None:
    """The records OpenRLHF would load from a local file: the non-empty lines of a jsonl file (or a
    ``.json`` file of JSON lines), the items of a ``.json`` array, a parquet file's rows; None when
    ``path`` is not a local file of those kinds (a hub dataset name, a folder, another format)."""
    p = Path(path)
    if not p.is_file():
        return None
    suffix = p.suffix.lower()
    if suffix == ".parquet":
        return _parquet_rows(p)
    if suffix not in (".jsonl", ".json"):
        return None
    with p.open("rb") as f:
        head = f.read(4096).lstrip()
    if suffix == ".json" and head.startswith(b"["):
        try:
            items = json.loads(p.read_text(encoding="utf-8"))
        except (ValueError, UnicodeDecodeError):
            return None
        return len(items) if isinstance(items, list) else None
    with p.open("rb") as f:
        return sum(1 for line in f if line.strip())


def _parquet_rows(path: Path) -> int | None:
    try:
        import pyarrow.parquet as pq
    except ImportError:
        return None
    try:
        return int(pq.ParquetFile(path).metadata.num_rows)
    except Exception:  # noqa: BLE001 - an unreadable file is one this machine cannot count
        return None


@dataclass(frozen=True)
class Schedule:
    """The passes a run makes and what they come to (``prompts`` None: the data could not be counted,
    ``num_episodes`` was given)."""

    episodes: int
    prompts: int | None = None
    steps_per_episode: int | None = None

    @property
    def steps(self) -> int | None:
        return None if self.steps_per_episode is None else self.steps_per_episode * self.episodes


def plan(cfg: Any) -> Schedule:
    """The run's schedule over ``cfg.prompt_data`` as this process finds it: ``num_episodes``, or with
    ``total_training_steps`` the whole passes whose steps come closest to it (at least one). A file
    that cannot be counted is a ValueError unless ``num_episodes`` was given (the default 15 passes
    of a dataset of unknown size would be a guess)."""
    n = prompt_count(cfg.prompt_data)
    if n is not None:
        return passes(cfg, n)
    what = f"prompt_data {cfg.prompt_data} is not a local file this machine can count (a hub dataset name?)"
    if cfg.total_training_steps is not None:
        raise ValueError(
            f"{what}, so total_training_steps {cfg.total_training_steps} cannot become whole passes: make the "
            "data a local jsonl file, or set total_training_steps=null and num_episodes=N (passes over it)"
        )
    if "num_episodes" not in cfg.model_fields_set:
        raise ValueError(
            f"{what}, so the run's length would be the default num_episodes {cfg.num_episodes} passes of a "
            "dataset of unknown size: set num_episodes=N, or make the data a local jsonl file"
        )
    return Schedule(cfg.num_episodes)


def passes(cfg: Any, prompts: int) -> Schedule:
    """The schedule of a run over ``prompts`` prompts (``max_samples`` of them at most)."""
    n = min(prompts, cfg.max_samples) if cfg.max_samples else prompts
    per = max(1, math.ceil(n / cfg.rollout_batch_size))
    if cfg.total_training_steps is None:
        return Schedule(cfg.num_episodes, n, per)
    return Schedule(max(1, round(cfg.total_training_steps / per)), n, per)


def optimizer_steps(cfg: Any, s: Schedule) -> int:
    """OpenRLHF 0.11.2's ``max_steps``: what its LR schedule (and so the warm-up ratio) spans."""
    assert s.prompts is not None
    return s.prompts * cfg.n_samples_per_prompt // cfg.train_batch_size * s.episodes * cfg.max_epochs


def schedule_line(cfg: Any, s: Schedule) -> str:
    """What ``train --check`` says of the run's length and warm-up (``s``: :func:`plan`'s)."""
    if s.steps is None or s.prompts is None:
        return (
            f"not checked: run length: prompt_data {cfg.prompt_data} is not a local file to count; "
            f"num_episodes {s.episodes} as given"
        )
    total = optimizer_steps(cfg, s)
    warmup = math.ceil(total * cfg.actor_warmup_ratio)
    per_step = max(total / max(s.steps, 1), 1e-9)
    target = (
        f" for total_training_steps {cfg.total_training_steps} (OpenRLHF 0.11.2 runs whole passes)"
        if cfg.total_training_steps
        else ""
    )
    return (
        f"run length: {s.prompts} prompts, {s.steps_per_episode} rollout steps a pass x {s.episodes} passes = "
        f"{s.steps} steps{target}; actor warm-up {cfg.actor_warmup_ratio:g} x {total} optimizer steps "
        f"= {warmup} (about {warmup / per_step:.0f} rollout steps), then {cfg.lr_scheduler}"
    )


def passes_warning(cfg: Any, s: Schedule) -> str | None:
    """A line when the run passes over its prompts more than :data:`MAX_PASSES` times (None: fewer)."""
    if s.episodes <= MAX_PASSES or s.prompts is None:
        return None
    how = (
        f"total_training_steps {cfg.total_training_steps} over {s.prompts} prompts"
        if cfg.total_training_steps
        else f"num_episodes {s.episodes}"
    )
    return (
        f"run length: {s.episodes} passes over prompt_data ({how}): every prompt is trained on "
        f"{s.episodes} times, more than {MAX_PASSES}, so the policy can memorise answers; use more prompts, "
        "or fewer total_training_steps / num_episodes"
    )
