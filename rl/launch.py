"""The OpenRLHF command builder and launcher: a :class:`TrainConfig` -> OpenRLHF 0.11.2's
``train_ppo_ray`` flags, the ``ray job submit`` command, and the run itself.

Every command is checked by OpenRLHF's own parser and argument checks
(:mod:`parallelsearch.rl.openrlhf_cli`) before it is printed or run.
"""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path
from typing import Any

from parallelsearch.rl.agent_config import ENV_VAR
from parallelsearch.rl.train_config import TrainConfig


def agent_module_path() -> Path:
    """The file to pass as ``--train.agent_func_path`` (OpenRLHF loads it by path)."""
    return Path(__file__).resolve().parent / "openrlhf_agent.py"


def openrlhf_args(cfg: TrainConfig) -> list[str]:
    """The flags after ``python -m openrlhf.cli.train_ppo_ray`` (OpenRLHF 0.11.2's dotted names)."""
    a: list[str] = []

    def opt(flag: str, value: Any) -> None:
        if value is None:
            return
        if isinstance(value, list | tuple):
            a.extend([flag, *(str(v) for v in value)])
        else:
            a.extend([flag, str(value)])

    def switch(flag: str, on: bool) -> None:
        if on:
            a.append(flag)

    for role in ("ref", "actor", "critic"):
        if role == "critic" and cfg.algorithm != "gae":
            continue
        opt(f"--{role}.num_nodes", cfg.nodes)
        opt(f"--{role}.num_gpus_per_node", cfg.gpus_per_node)
    opt("--vllm.num_engines", cfg.vllm_num_engines)
    opt("--vllm.tensor_parallel_size", cfg.vllm_tensor_parallel_size)
    opt("--vllm.gpu_memory_utilization", cfg.vllm_gpu_memory_utilization)
    switch("--train.colocate_all", cfg.colocate_all)
    switch("--vllm.enable_sleep", cfg.colocate_all and not cfg.async_train)
    switch("--ds.enable_sleep", cfg.colocate_all and not cfg.async_train)
    switch("--train.async_enable", cfg.async_train)

    opt("--actor.model_name_or_path", cfg.model)
    if cfg.algorithm == "gae":
        opt("--critic.model_name_or_path", cfg.critic_model or cfg.model)
    opt("--train.agent_func_path", str(agent_module_path()))
    opt("--data.prompt_dataset", cfg.prompt_data)
    opt("--data.input_key", cfg.input_key)
    opt("--data.label_key", cfg.label_key)
    switch("--data.apply_chat_template", cfg.apply_chat_template)
    opt("--data.max_samples", cfg.max_samples)
    opt("--data.max_len", cfg.max_len)
    if cfg.eval_data:
        opt("--eval.dataset", cfg.eval_data)
        opt("--eval.steps", cfg.eval_steps)

    opt("--algo.advantage.estimator", cfg.algorithm)
    opt("--algo.advantage.gamma", cfg.gamma)
    opt("--algo.advantage.lambd", cfg.lambd)
    opt("--rollout.n_samples_per_prompt", cfg.n_samples_per_prompt)
    opt("--rollout.batch_size", cfg.rollout_batch_size)
    opt("--rollout.micro_batch_size", cfg.micro_rollout_batch_size)
    opt("--train.batch_size", cfg.train_batch_size)
    opt("--train.micro_batch_size", cfg.micro_train_batch_size)
    opt("--rollout.max_new_tokens", cfg.max_new_tokens_per_turn)
    opt("--rollout.temperature", cfg.temperature)
    opt("--rollout.top_p", cfg.top_p)
    opt("--actor.adam.lr", cfg.actor_lr)
    opt("--actor.lr_warmup_ratio", cfg.actor_warmup_ratio)
    opt("--actor.eps_clip", cfg.eps_clip)
    if cfg.algorithm == "gae":
        opt("--critic.adam.lr", cfg.critic_lr)
        opt("--critic.lr_warmup_ratio", cfg.critic_warmup_ratio)
    opt("--algo.kl.init_coef", cfg.init_kl_coef)
    switch("--algo.kl.use_loss", cfg.use_kl_loss)
    opt("--algo.kl.estimator", cfg.kl_estimator)
    switch("--algo.dynamic_filtering_enable", cfg.dynamic_filtering)
    if cfg.dynamic_filtering:
        opt("--algo.dynamic_filtering_range", list(cfg.dynamic_filtering_range))
    opt("--train.num_episodes", cfg.num_episodes)
    opt("--train.max_epochs", cfg.max_epochs)
    opt("--train.seed", cfg.seed)

    opt("--ds.zero_stage", cfg.zero_stage)
    opt("--ds.param_dtype", cfg.param_dtype)
    opt("--ds.attn_implementation", cfg.attn_implementation)
    switch("--ds.packing_samples", cfg.packing_samples)
    switch("--actor.gradient_checkpointing_enable", cfg.gradient_checkpointing)
    switch("--ds.adam_offload", cfg.adam_offload)
    switch("--ref.offload", cfg.ref_offload)

    opt("--ckpt.output_dir", cfg.save_path)
    opt("--ckpt.path", cfg.ckpt_path or str(Path(cfg.save_path) / "ckpt"))
    opt("--ckpt.save_steps", cfg.save_steps)
    opt("--ckpt.max_num", cfg.max_ckpt_num)
    switch("--ckpt.save_hf", cfg.save_hf)
    switch("--ckpt.load_enable", cfg.resume)
    opt("--logger.logging_steps", cfg.logging_steps)
    if cfg.wandb_project:
        opt("--logger.wandb.key", cfg.wandb_key or "$WANDB_API_KEY")
        opt("--logger.wandb.project", cfg.wandb_project)
        opt("--logger.wandb.run_name", cfg.wandb_run_name)
    opt("--logger.tensorboard_dir", cfg.tensorboard_dir)
    return a


def python_command(cfg: TrainConfig) -> list[str]:
    return ["python3", "-m", "openrlhf.cli.train_ppo_ray", *openrlhf_args(cfg)]


def runtime_env(cfg: TrainConfig) -> dict[str, Any]:
    env: dict[str, Any] = {"env_vars": {ENV_VAR: str(cfg.agent_config_path())}}
    if cfg.working_dir:
        env["working_dir"] = cfg.working_dir
    return env


def ray_submit_command(cfg: TrainConfig) -> list[str]:
    return [
        "ray",
        "job",
        "submit",
        f"--address={cfg.ray_address}",
        f"--runtime-env-json={json.dumps(runtime_env(cfg))}",
        "--",
        *python_command(cfg),
    ]


def shell(cmd: list[str]) -> str:
    """The command as copy-pasteable shell, one flag (with its values) per line."""
    lines: list[list[str]] = [[]]
    for tok in cmd:
        if (
            tok.startswith("--")
            and len(tok) > 2
            and lines[-1]
            and (len(lines) > 1 or tok.startswith("--runtime"))
        ):
            lines.append([])
        elif tok in ("--", "python3") and lines[-1]:
            lines.append([])
        lines[-1].append(tok if tok.startswith("$") else shlex.quote(tok))
    return " \\\n    ".join(" ".join(x) for x in lines)


def launch(cfg: TrainConfig, *, dry_run: bool = False, runner: str = "ray", out: Any = None) -> int:
    """Print (dry run) or write the agent config and submit the job."""
    import subprocess

    out = out or sys.stdout
    cmd = ray_submit_command(cfg) if runner == "ray" else python_command(cfg)
    checked = "not checked (openrlhf is not installed)"
    try:
        from parallelsearch.rl.openrlhf_cli import check_command

        check_command(openrlhf_args(cfg))
        checked = "checked against OpenRLHF's own parser and argument checks"
    except RuntimeError as e:
        checked = f"not checked ({e})"
    print(f"# agent config -> {cfg.agent_config_path()} ({ENV_VAR})", file=out)
    print(cfg.agent_config_yaml(), file=out)
    print(f"# command ({checked})", file=out)
    print(shell(cmd), file=out)
    if dry_run:
        return 0
    path = cfg.agent_config_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(cfg.agent_config_yaml(), encoding="utf-8")
    env = None
    if runner != "ray":
        import os

        env = {**os.environ, ENV_VAR: str(path)}
    try:
        return subprocess.call(cmd, env=env)
    except FileNotFoundError as e:
        raise RuntimeError(
            f"cannot run {cmd[0]!r}: install the 'train' extra (ray, openrlhf) on the GPU machine"
        ) from e


#: names that moved to :mod:`parallelsearch.rl.train_config` (they resolve here, with a warning, until 0.3)
_MOVED = ("paper_preset", "PRESETS", "load_train_config", "parse_overrides")


def __getattr__(name: str) -> Any:
    if name in _MOVED:
        import importlib
        import warnings

        warnings.warn(
            f"parallelsearch.rl.launch.{name} moved to parallelsearch.rl.train_config; the old name goes in 0.3",
            DeprecationWarning,
            stacklevel=2,
        )
        return getattr(importlib.import_module("parallelsearch.rl.train_config"), name)
    raise AttributeError(f"module 'parallelsearch.rl.launch' has no attribute {name!r}")
