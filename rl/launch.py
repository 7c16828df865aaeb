"""The training launcher: a pydantic config -> OpenRLHF 0.11.2's ``train_ppo_ray`` command and Ray job.

``TrainConfig`` holds what a ParallelSearch run needs (model, data, algorithm, batch
sizes, learning rates, KL, lengths, vLLM engines, colocation, async, dynamic filtering,
checkpoints, loggers) plus the agent's own config (retriever, graph, reward), which is
written to a YAML file that every Ray actor reads through ``PARALLELSEARCH_AGENT_CONFIG``.
``PRESETS["paper"]`` mirrors the official ``train_parallelsearch.sh`` PPO settings.
"""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path
from typing import Any, Literal

from parallelsearch.rl.agent_config import ENV_VAR, AgentConfig
from pydantic import BaseModel, ConfigDict, Field, model_validator

ALGORITHMS = ("gae", "reinforce_baseline", "group_norm", "rloo")


def agent_module_path() -> Path:
    """The file to pass as ``--train.agent_func_path`` (OpenRLHF loads it by path)."""
    return Path(__file__).resolve().parent / "openrlhf_agent.py"


class TrainConfig(BaseModel):
    """One training run. Field names say what they set; ``openrlhf_args`` maps them to OpenRLHF's flags."""

    model_config = ConfigDict(extra="forbid")

    # model and data
    model: str = Field(..., description="actor (policy) model path or hub name")
    critic_model: str | None = Field(None, description="critic for gae (default: the actor's weights)")
    prompt_data: str = Field(..., description="jsonl from `parallelsearch make-train-data`")
    eval_data: str | None = None
    input_key: str = "prompt"
    label_key: str = "label"
    apply_chat_template: bool = Field(False, description="let OpenRLHF chat-template raw prompts")
    max_samples: int | None = None
    # algorithm
    algorithm: Literal["gae", "reinforce_baseline", "group_norm", "rloo"] = "gae"
    n_samples_per_prompt: int = Field(1, ge=1)
    rollout_batch_size: int = Field(512, ge=1)
    train_batch_size: int = Field(256, ge=1)
    micro_train_batch_size: int = Field(8, ge=1)
    micro_rollout_batch_size: int = Field(16, ge=1)
    actor_lr: float = Field(1e-6, gt=0)
    critic_lr: float = Field(1e-5, gt=0)
    actor_warmup_ratio: float = Field(0.285, ge=0, le=1)
    critic_warmup_ratio: float = Field(0.015, ge=0, le=1)
    init_kl_coef: float = Field(0.001, ge=0)
    use_kl_loss: bool = False
    kl_estimator: Literal["k1", "k2", "k3"] = "k1"
    eps_clip: float = 0.2
    gamma: float = 1.0
    lambd: float = 1.0
    num_episodes: int = Field(15, ge=1)
    max_epochs: int = Field(1, ge=1)
    seed: int = 42
    # lengths and sampling
    max_len: int = Field(6196, ge=64, description="prompt + every turn + every observation, in tokens")
    max_new_tokens_per_turn: int = Field(500, ge=1)
    temperature: float = Field(1.0, ge=0)
    top_p: float = Field(1.0, gt=0, le=1)
    # resources
    nodes: int = Field(1, ge=1)
    gpus_per_node: int = Field(8, ge=1)
    vllm_num_engines: int = Field(8, ge=1)
    vllm_tensor_parallel_size: int = Field(1, ge=1)
    vllm_gpu_memory_utilization: float = Field(0.6, gt=0, le=1)
    colocate_all: bool = True
    async_train: bool = False
    dynamic_filtering: bool = False
    dynamic_filtering_range: tuple[float, float] = (0.0, 1.0)
    zero_stage: int = Field(3, ge=0, le=3)
    gradient_checkpointing: bool = True
    adam_offload: bool = True
    ref_offload: bool = True
    param_dtype: Literal["bf16", "fp16"] = "bf16"
    attn_implementation: str = "flash_attention_2"
    packing_samples: bool = False
    # checkpoints and logs
    save_path: str = "./checkpoints/parallelsearch"
    ckpt_path: str | None = Field(None, description="DeepSpeed checkpoints (default: save_path/ckpt)")
    save_steps: int = 100
    eval_steps: int = 100
    max_ckpt_num: int = 3
    resume: bool = Field(False, description="load the latest checkpoint in ckpt_path")
    save_hf: bool = True
    wandb_project: str | None = None
    wandb_run_name: str | None = None
    wandb_key: str | None = Field(None, description="API key; prefer the WANDB_API_KEY environment variable")
    tensorboard_dir: str | None = None
    logging_steps: int = 1
    # the agent (written to the file named by PARALLELSEARCH_AGENT_CONFIG)
    agent: AgentConfig = Field(
        default_factory=lambda: AgentConfig(retriever_url="http://127.0.0.1:8000/retrieve")
    )
    # Ray job submission
    ray_address: str = "http://127.0.0.1:8265"
    working_dir: str | None = None

    @model_validator(mode="after")
    def _consistent(self) -> TrainConfig:
        if self.algorithm != "gae" and self.n_samples_per_prompt < 2:
            raise ValueError(f"{self.algorithm} needs n_samples_per_prompt >= 2 (a per-prompt baseline)")
        if self.dynamic_filtering and self.n_samples_per_prompt < 2:
            raise ValueError("dynamic_filtering needs n_samples_per_prompt >= 2")
        lo, hi = self.dynamic_filtering_range
        if lo >= hi:
            raise ValueError("dynamic_filtering_range must be (low, high) with low < high")
        if self.train_batch_size > self.rollout_batch_size * self.n_samples_per_prompt:
            raise ValueError("train_batch_size cannot exceed rollout_batch_size * n_samples_per_prompt")
        # one per-turn cap for the engine and the graph
        self.agent.graph_config.max_new_tokens = self.max_new_tokens_per_turn
        return self

    # -- the command -------------------------------------------------------------------
    def agent_config_path(self) -> Path:
        return Path(self.save_path).resolve() / "parallelsearch_agent.yaml"

    def agent_config_yaml(self) -> str:
        import yaml

        return yaml.safe_dump(self.agent.model_dump(mode="json", exclude_none=True), sort_keys=False)

    def openrlhf_args(self) -> list[str]:
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
            if role == "critic" and self.algorithm != "gae":
                continue
            opt(f"--{role}.num_nodes", self.nodes)
            opt(f"--{role}.num_gpus_per_node", self.gpus_per_node)
        opt("--vllm.num_engines", self.vllm_num_engines)
        opt("--vllm.tensor_parallel_size", self.vllm_tensor_parallel_size)
        opt("--vllm.gpu_memory_utilization", self.vllm_gpu_memory_utilization)
        switch("--train.colocate_all", self.colocate_all)
        switch("--vllm.enable_sleep", self.colocate_all and not self.async_train)
        switch("--ds.enable_sleep", self.colocate_all and not self.async_train)
        switch("--train.async_enable", self.async_train)

        opt("--actor.model_name_or_path", self.model)
        if self.algorithm == "gae":
            opt("--critic.model_name_or_path", self.critic_model or self.model)
        opt("--train.agent_func_path", str(agent_module_path()))
        opt("--data.prompt_dataset", self.prompt_data)
        opt("--data.input_key", self.input_key)
        opt("--data.label_key", self.label_key)
        switch("--data.apply_chat_template", self.apply_chat_template)
        opt("--data.max_samples", self.max_samples)
        opt("--data.max_len", self.max_len)
        if self.eval_data:
            opt("--eval.dataset", self.eval_data)
            opt("--eval.steps", self.eval_steps)

        opt("--algo.advantage.estimator", self.algorithm)
        opt("--algo.advantage.gamma", self.gamma)
        opt("--algo.advantage.lambd", self.lambd)
        opt("--rollout.n_samples_per_prompt", self.n_samples_per_prompt)
        opt("--rollout.batch_size", self.rollout_batch_size)
        opt("--rollout.micro_batch_size", self.micro_rollout_batch_size)
        opt("--train.batch_size", self.train_batch_size)
        opt("--train.micro_batch_size", self.micro_train_batch_size)
        opt("--rollout.max_new_tokens", self.max_new_tokens_per_turn)
        opt("--rollout.temperature", self.temperature)
        opt("--rollout.top_p", self.top_p)
        opt("--actor.adam.lr", self.actor_lr)
        opt("--actor.lr_warmup_ratio", self.actor_warmup_ratio)
        opt("--actor.eps_clip", self.eps_clip)
        if self.algorithm == "gae":
            opt("--critic.adam.lr", self.critic_lr)
            opt("--critic.lr_warmup_ratio", self.critic_warmup_ratio)
        opt("--algo.kl.init_coef", self.init_kl_coef)
        switch("--algo.kl.use_loss", self.use_kl_loss)
        opt("--algo.kl.estimator", self.kl_estimator)
        switch("--algo.dynamic_filtering_enable", self.dynamic_filtering)
        if self.dynamic_filtering:
            opt("--algo.dynamic_filtering_range", list(self.dynamic_filtering_range))
        opt("--train.num_episodes", self.num_episodes)
        opt("--train.max_epochs", self.max_epochs)
        opt("--train.seed", self.seed)

        opt("--ds.zero_stage", self.zero_stage)
        opt("--ds.param_dtype", self.param_dtype)
        opt("--ds.attn_implementation", self.attn_implementation)
        switch("--ds.packing_samples", self.packing_samples)
        switch("--actor.gradient_checkpointing_enable", self.gradient_checkpointing)
        switch("--ds.adam_offload", self.adam_offload)
        switch("--ref.offload", self.ref_offload)

        opt("--ckpt.output_dir", self.save_path)
        opt("--ckpt.path", self.ckpt_path or str(Path(self.save_path) / "ckpt"))
        opt("--ckpt.save_steps", self.save_steps)
        opt("--ckpt.max_num", self.max_ckpt_num)
        switch("--ckpt.save_hf", self.save_hf)
        switch("--ckpt.load_enable", self.resume)
        opt("--logger.logging_steps", self.logging_steps)
        if self.wandb_project:
            opt("--logger.wandb.key", self.wandb_key or "$WANDB_API_KEY")
            opt("--logger.wandb.project", self.wandb_project)
            opt("--logger.wandb.run_name", self.wandb_run_name)
        opt("--logger.tensorboard_dir", self.tensorboard_dir)
        return a

    def python_command(self) -> list[str]:
        return ["python3", "-m", "openrlhf.cli.train_ppo_ray", *self.openrlhf_args()]

    def runtime_env(self) -> dict[str, Any]:
        env: dict[str, Any] = {"env_vars": {ENV_VAR: str(self.agent_config_path())}}
        if self.working_dir:
            env["working_dir"] = self.working_dir
        return env

    def ray_submit_command(self) -> list[str]:
        return [
            "ray",
            "job",
            "submit",
            f"--address={self.ray_address}",
            f"--runtime-env-json={json.dumps(self.runtime_env())}",
            "--",
            *self.python_command(),
        ]


def paper_preset(**overrides: Any) -> TrainConfig:
    """The official train_parallelsearch.sh settings (Qwen2.5-7B-Instruct, PPO/GAE, 8 GPUs, NQ+HotpotQA)."""
    base: dict[str, Any] = {
        "model": "Qwen/Qwen2.5-7B-Instruct",
        "prompt_data": "data/nq_hotpotqa_train/train.jsonl",
        "algorithm": "gae",
        "n_samples_per_prompt": 1,
        "rollout_batch_size": 512,
        "train_batch_size": 256,
        "actor_lr": 1e-6,
        "critic_lr": 1e-5,
        "actor_warmup_ratio": 0.285,
        "critic_warmup_ratio": 0.015,
        "init_kl_coef": 0.001,
        "temperature": 1.0,
        "top_p": 1.0,
        "max_len": 6196,  # max_prompt_length 5696 (rolling context) + max_response_length 500
        "max_new_tokens_per_turn": 500,
        "num_episodes": 15,
        "save_steps": 100,
        "eval_steps": 100,
        "wandb_project": "ParallelSearch",
        "agent": {
            "retriever_url": "http://127.0.0.1:8000/retrieve",
            "graph": "parallel",
            "graph_config": {
                "top_k": 3,
                "max_turns": 4,
                "max_new_tokens": 500,
                "prompt_template": "official",
            },
            "reward": {"mode": "paper"},
        },
    }
    return TrainConfig(**_deep_merge(base, overrides))


PRESETS = {"paper": paper_preset}


def _deep_merge(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    out = dict(a)
    for k, v in b.items():
        out[k] = _deep_merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def parse_overrides(items: list[str]) -> dict[str, Any]:
    """``key.sub=value`` strings -> a nested dict; values are parsed as YAML scalars."""
    import yaml

    out: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"--set expects key=value, got {item!r}")
        node = out
        parts = key.strip().split(".")
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        node[parts[-1]] = yaml.safe_load(raw)
    return out


def load_train_config(
    path: str | Path | None = None, preset: str | None = None, overrides: list[str] = ()
) -> TrainConfig:
    """A config from a YAML/JSON file or a preset, with ``key=value`` overrides; errors name the field."""
    from parallelsearch.rl.agent_config import read_config_file
    from pydantic import ValidationError

    if (path is None) == (preset is None):
        raise ValueError("give exactly one of --config FILE or --preset NAME")
    extra = parse_overrides(list(overrides))
    try:
        if preset is not None:
            if preset not in PRESETS:
                raise ValueError(f"unknown preset {preset!r}; known: {', '.join(PRESETS)}")
            return PRESETS[preset](**extra)
        return TrainConfig(**_deep_merge(read_config_file(path), extra))
    except ValidationError as e:
        where = f"config {path}" if path else f"preset {preset}"
        problems = "; ".join(f"{'.'.join(str(x) for x in err['loc'])}: {err['msg']}" for err in e.errors())
        raise ValueError(f"{where} is invalid: {problems}") from e


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
    cmd = cfg.ray_submit_command() if runner == "ray" else cfg.python_command()
    checked = "not checked (openrlhf is not installed)"
    try:
        from parallelsearch.rl.openrlhf_cli import check_command

        check_command(cfg.openrlhf_args())
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
