"""OpenRLHF 0.11.2's ``train_ppo_ray`` flags for a :class:`TrainConfig`: the one place that maps
the config to the command, which the pre-flight checks and the launcher both read."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from parallelsearch.rl.schedule import Schedule, plan
from parallelsearch.rl.train_config import OPENRLHF_NAMES, TrainConfig


def agent_module_path() -> Path:
    """The file to pass as ``--train.agent_func_path`` (OpenRLHF loads it by path)."""
    return Path(__file__).resolve().parent / "openrlhf_agent.py"


#: the value of ``--logger.wandb.key`` that turns OpenRLHF's wandb logger on without the key: its
#: WandbLogger logs in with the flag only when wandb finds no WANDB_API_KEY in the environment
WANDB_FROM_ENV = "from-env:WANDB_API_KEY"


def wandb_key_source(cfg: TrainConfig, environ: Mapping[str, str] | None = None) -> tuple[str | None, str]:
    """The value for ``--logger.wandb.key`` (None: wandb off) and a line saying why.

    The key itself is never on the command: it is :data:`WANDB_FROM_ENV`, and ``command.sh`` puts
    WANDB_API_KEY in the runtime env of every Ray worker, where wandb reads it.
    """
    env = os.environ if environ is None else environ
    if cfg.wandb == "off" or not cfg.wandb_project:
        return None, "wandb: off" + ("" if cfg.wandb_project else " (no wandb_project)")
    if env.get("WANDB_API_KEY"):
        return WANDB_FROM_ENV, "wandb: on (WANDB_API_KEY from the environment, shipped in Ray's runtime env)"
    if cfg.wandb == "on":
        raise ValueError("wandb=on but no key: export WANDB_API_KEY (or set wandb=off)")
    return None, "wandb: off (WANDB_API_KEY is not set; export it to log to wandb, or set wandb=off)"


def openrlhf_args(
    cfg: TrainConfig,
    *,
    agent_func_path: str | None = None,
    environ: Mapping[str, str] | None = None,
    schedule: Schedule | None = None,
) -> list[str]:
    """The flags after ``python -m openrlhf.cli.train_ppo_ray`` (OpenRLHF 0.11.2's dotted names):
    each field of :data:`OPENRLHF_NAMES` that applies, the layout and the agent module.

    ``--train.num_episodes`` is ``schedule``'s (the job's: :func:`~parallelsearch.rl.schedule.plan`
    on the file it ships); without one, only the flags' shape is being checked, and the passes are
    counted where the config's data is (``num_episodes`` when it cannot be)."""
    flags: dict[str, Any] = {}
    for role in ("ref", "actor", "critic"):
        flags[f"{role}.num_nodes"] = cfg.nodes
        flags[f"{role}.num_gpus_per_node"] = cfg.gpus_per_node
    flags["vllm.enable_sleep"] = flags["ds.enable_sleep"] = cfg.colocate_all and not cfg.async_train
    flags["train.agent_func_path"] = agent_func_path or str(agent_module_path())
    flags.update({flag: getattr(cfg, name) for flag, name in OPENRLHF_NAMES.items()})
    flags["train.num_episodes"] = (schedule or _shape_only(cfg)).episodes
    flags["critic.model_name_or_path"] = cfg.critic_model or cfg.model
    flags["ckpt.path"] = cfg.ckpt_path or str(Path(cfg.save_path) / "ckpt")
    flags["logger.wandb.key"], _ = wandb_key_source(cfg, environ)
    flags.update(is_correction_flags(cfg))
    off = {
        "critic.": not cfg.estimator.critic,
        "eval.": not cfg.eval_data,
        "algo.dynamic_filtering_range": not cfg.dynamic_filtering,
        "logger.wandb.": not flags["logger.wandb.key"],
    }
    skipped = tuple(prefix for prefix, skip in off.items() if skip)
    flags.update(cfg.openrlhf_flags)
    a: list[str] = []
    for flag, value in flags.items():
        if value is None or value is False or flag.startswith(skipped):
            continue
        a.append(f"--{flag}")
        if value is not True:
            a.extend(str(v) for v in (value if isinstance(value, list | tuple) else [value]))
    return a


def _shape_only(cfg: TrainConfig) -> Schedule:
    """A schedule for checking the command's flags only (never for a command that runs)."""
    try:
        return plan(cfg)
    except ValueError:
        return Schedule(cfg.num_episodes)


#: :attr:`TrainConfig.is_correction` -> OpenRLHF 0.11.2's (level, mode, gating)
IS_CORRECTIONS = {"tis": ("token", "clip", "ratio"), "icepop": ("token", "mask", "ratio")}


def is_correction_flags(cfg: TrainConfig) -> dict[str, Any]:
    """OpenRLHF's importance-sampling correction of the engine/trainer log-prob mismatch: on, it
    asks vLLM for the sampled tokens' log-probs and weighs each token's loss by pi_train / pi_engine
    within ``is_clip`` (its ``algo.advantage.is_correction_*`` flags; off, no flag)."""
    if cfg.is_correction == "off":
        return {"algo.advantage.is_correction_threshold": None}
    level, mode, gating = IS_CORRECTIONS[cfg.is_correction]
    return {
        "algo.advantage.is_correction_level": level,
        "algo.advantage.is_correction_mode": mode,
        "algo.advantage.is_correction_gating": gating,
    }
