"""The training run's configuration: :class:`TrainConfig`, its presets, and loading it from files.

``TrainConfig`` holds what a ParallelSearch run needs (model, data, algorithm, batch
sizes, learning rates, KL, lengths, vLLM engines, colocation, async, dynamic filtering,
checkpoints, loggers) plus the agent's own config (retriever, graph, reward), which is
written to a YAML file that every Ray actor reads through ``PARALLELSEARCH_AGENT_CONFIG``.
``PRESETS["paper"]`` mirrors the official ``train_parallelsearch.sh`` PPO settings.
:mod:`parallelsearch.rl.launch` turns a config into OpenRLHF's command.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from parallelsearch.rl.agent_config import AgentConfig


class TrainConfig(BaseModel):
    """One training run. Field names say what they set; ``launch.openrlhf_args`` maps them to OpenRLHF's flags."""

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

    # -- the agent's config file ----------------------------------------------------------
    def agent_config_path(self) -> Path:
        return Path(self.save_path).resolve() / "parallelsearch_agent.yaml"

    def agent_config_yaml(self) -> str:
        import yaml

        # the retriever's key is never written (the dump would hold '**********', a wrong key):
        # the actors read PARALLELSEARCH_RETRIEVER_API_KEY from their environment
        text = yaml.safe_dump(
            self.agent.model_dump(mode="json", exclude_none=True, exclude={"retriever_api_key"}),
            sort_keys=False,
        )
        if self.agent.retriever_api_key is not None:
            text += "# retriever_api_key: not written here; set PARALLELSEARCH_RETRIEVER_API_KEY for every actor\n"
        return text

    # -- deprecated: the command moved to parallelsearch.rl.launch (goes in 0.3) -------------
    def openrlhf_args(self) -> list[str]:
        return _deprecated_command("openrlhf_args", self)

    def python_command(self) -> list[str]:
        return _deprecated_command("python_command", self)

    def ray_submit_command(self) -> list[str]:
        return _deprecated_command("ray_submit_command", self)

    def runtime_env(self) -> dict[str, Any]:
        return _deprecated_command("runtime_env", self)


def _deprecated_command(name: str, cfg: TrainConfig) -> Any:
    import importlib
    import warnings

    warnings.warn(
        f"TrainConfig.{name}() is deprecated; use parallelsearch.rl.launch.{name}(cfg) (goes in 0.3)",
        DeprecationWarning,
        stacklevel=3,
    )
    return getattr(importlib.import_module("parallelsearch.rl.launch"), name)(cfg)


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
    from pydantic import ValidationError

    from parallelsearch.rl.agent_config import read_config_file

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
