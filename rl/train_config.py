"""The training run's configuration: :class:`TrainConfig`, its presets, and loading it from files.

The agent's own config (retriever, graph, reward) is written to a YAML file every Ray actor reads
through ``PARALLELSEARCH_AGENT_CONFIG``. The field defaults are the official ``train_parallelsearch.sh``
PPO values; ``PRESETS["paper"]`` adds its model, data, chat templating and agent.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from parallelsearch.graphs.config import MaxNewTokens, Temperature, TopP
from parallelsearch.rl.agent_config import LIST_KEYS, AgentConfig
from parallelsearch.rl.estimators import ALGORITHM_ALIASES, ESTIMATORS, Estimator, estimator, estimator_name
from parallelsearch.stores.errors import describe_validation_error, did_you_mean, sub_model


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
    # algorithm: a row of rl/estimators.py's ESTIMATORS (what it needs is read from the row)
    algorithm: str = Field(
        "gae",
        description="advantage estimator: "
        + ", ".join(ESTIMATORS)
        + "; "
        + ", ".join(f"'{a}' means {n}" for a, n in ALGORITHM_ALIASES.items()),
    )
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
    # the official run's verl defaults (ppo_trainer.yaml, fsdp_workers.py); OpenRLHF's own differ
    entropy_coef: float | None = Field(
        0.001,
        description="entropy bonus of the actor's loss (verl's entropy_coeff 0.001; null: no entropy term, "
        "OpenRLHF's default)",
    )
    adam_betas: tuple[float, float] = Field(
        (0.9, 0.999), description="AdamW betas of actor and critic (verl's; OpenRLHF's default (0.9, 0.95))"
    )
    weight_decay: float = Field(
        0.01, ge=0, description="AdamW weight decay of actor and critic (verl's; OpenRLHF's default 0)"
    )
    # the engine's and the trainer's log-probs of a sampled token differ (kernels, precision, the
    # weight sync): a ratio pi_train / pi_engine corrects the off-policy gradient (docs/training.md)
    is_correction: Literal["tis", "icepop", "off"] = Field(
        "tis",
        description="engine/trainer log-prob mismatch correction: tis clips each token's importance ratio "
        "pi_train/pi_engine into is_clip (truncated IS), icepop drops tokens outside it, off none; on, the "
        "engine returns the sampled tokens' log-probs and OpenRLHF logs the mismatch as vllm_kl each step",
    )
    is_clip: tuple[float, float] = Field(
        (0.0, 2.0), description="(low, high) of the importance ratio: TIS truncates at 2 (Yao et al. 2025)"
    )
    gamma: float = 1.0
    lambd: float = 1.0
    num_episodes: int = Field(15, ge=1)
    total_training_steps: int | None = Field(
        None,
        ge=1,
        description="the run's rollout steps, as the official script's total_training_steps: num_episodes "
        "becomes the whole passes over prompt_data that come closest (OpenRLHF 0.11.2 runs whole passes)",
    )
    lr_scheduler: str = Field(
        "cosine_with_min_lr", description="actor and critic LR schedule (transformers' get_scheduler names)"
    )
    max_epochs: int = Field(1, ge=1)
    seed: int = 42
    # lengths and sampling
    # the official max_prompt_length 5696 (rolling context) + max_response_length 500
    max_len: int = Field(6196, ge=64, description="prompt + every turn + every observation, in tokens")
    max_new_tokens_per_turn: MaxNewTokens = 500  # becomes the agent's graph_config.max_new_tokens
    temperature: Temperature = 1.0
    top_p: TopP = 1.0
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
    wandb: Literal["auto", "on", "off"] = Field(
        "auto", description="auto: on when wandb_project is set and WANDB_API_KEY is in the environment"
    )
    wandb_project: str | None = None
    wandb_run_name: str | None = None
    tensorboard_dir: str | None = None
    logging_steps: int = 1
    # train --check: the training questions' gold answers in the retriever's top-k
    corpus_check_questions: int = Field(
        200, ge=0, description="questions train --check searches for their gold answers (0: no corpus check)"
    )
    corpus_check_floor: float = Field(
        0.2, ge=0, le=1, description="least share of them with a gold answer in the top-k passages"
    )
    openrlhf_flags: dict[str, Any] = Field(
        default_factory=dict,
        description="any other OpenRLHF 0.11.2 train_ppo_ray flag by its dotted name (--set "
        "actor.max_norm=0.5), checked by OpenRLHF's own parser",
    )
    # the agent (written to the file named by PARALLELSEARCH_AGENT_CONFIG)
    agent: AgentConfig = Field(
        default_factory=lambda: AgentConfig(retriever_url="http://127.0.0.1:8000/retrieve")
    )
    # Ray job submission
    ray_address: str = "http://127.0.0.1:8265"
    job_dir: str = Field(
        "jobs/parallelsearch", description="the job folder train writes (Ray's working_dir for the job)"
    )
    copy_data: bool = Field(
        True, description="copy local prompt/eval files into the job folder (else give paths every node has)"
    )

    @model_validator(mode="before")
    @classmethod
    def _no_key_in_files(cls, data: Any) -> Any:
        """wandb's key in a config would be written to the job folder and reach a command line."""
        if isinstance(data, dict) and data.get("wandb_key"):
            raise ValueError(
                "wandb_key: a key in a config ends up in files and on the Ray job's command line; export "
                "WANDB_API_KEY instead (command.sh ships it in Ray's runtime env)"
            )
        return data

    @field_validator("algorithm", mode="before")
    @classmethod
    def _algorithm_alias(cls, value: Any) -> Any:
        return estimator_name(value) if isinstance(value, str) else value

    @field_validator("wandb", mode="before")
    @classmethod
    def _wandb_switch(cls, value: Any) -> Any:
        """YAML reads ``on``/``off`` as booleans."""
        return {True: "on", False: "off"}.get(value, value) if isinstance(value, bool) else value

    @field_validator("is_correction", mode="before")
    @classmethod
    def _is_correction_off(cls, value: Any) -> Any:
        """YAML reads ``off`` as false."""
        return "off" if value is False else value

    @property
    def estimator(self) -> Estimator:
        """The algorithm's row of ``ESTIMATORS``: whether it trains a critic, whether it needs a group."""
        return estimator(self.algorithm)

    @model_validator(mode="after")
    def _consistent(self) -> TrainConfig:
        if self.estimator.group and self.n_samples_per_prompt < 2:
            raise ValueError(
                f"n_samples_per_prompt: algorithm {self.algorithm} needs >= 2 (a per-prompt baseline), "
                f"got {self.n_samples_per_prompt}"
            )
        if self.dynamic_filtering and self.n_samples_per_prompt < 2:
            raise ValueError("n_samples_per_prompt: dynamic_filtering needs >= 2")
        lo, hi = self.dynamic_filtering_range
        if lo >= hi:
            raise ValueError("dynamic_filtering_range: must be (low, high) with low < high")
        if not 0 <= self.is_clip[0] < 1 < self.is_clip[1]:
            raise ValueError(f"is_clip: must be (low, high) with 0 <= low < 1 < high, got {self.is_clip}")
        if self.total_training_steps is not None and "num_episodes" in self.model_fields_set:
            raise ValueError(
                "num_episodes: total_training_steps sets it from the data; give one of them "
                "(set total_training_steps=null to give num_episodes)"
            )
        if self.train_batch_size > self.rollout_batch_size * self.n_samples_per_prompt:
            raise ValueError(
                f"train_batch_size: {self.train_batch_size} exceeds rollout_batch_size * n_samples_per_prompt "
                f"= {self.rollout_batch_size} * {self.n_samples_per_prompt}"
            )
        if self.nodes > 1:
            where = loopback_endpoint(self.agent)
            if where:
                raise ValueError(
                    f"{where} with nodes={self.nodes}: each node would query its own machine; "
                    "give an address every node reaches (the retriever host's IP or DNS name)"
                )
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
        text = yaml.safe_dump(self.agent.file_dump(), sort_keys=False)
        if self.agent.retriever_api_key is not None:
            text += "# retriever_api_key: not written here; set PARALLELSEARCH_RETRIEVER_API_KEY for every actor\n"
        return text


def paper_preset(**overrides: Any) -> TrainConfig:
    """The official train_parallelsearch.sh settings (Qwen2.5-7B-Instruct, PPO/GAE, 8 GPUs, NQ+HotpotQA).

    Prompt and template as the official code trains (docs/training.md): prompts in the official
    template, raw in the data file and chat-templated by OpenRLHF with the actor's tokenizer (as
    verl's dataset does). The reward is ``paper-strict`` (the paper's terms, read from the record,
    decomposition paid only for splits that were searched); ``agent.reward.mode=official`` gives
    the official code's numbers, quirks included, for parity with its published runs.
    """
    base: dict[str, Any] = {  # the rest are the field defaults (the script's PPO values)
        "model": "Qwen/Qwen2.5-7B-Instruct",
        "prompt_data": "data/nq_hotpotqa_train/train.jsonl",
        "apply_chat_template": True,
        "wandb_project": "ParallelSearch",
        "total_training_steps": 1005,
        "lr_scheduler": "constant_with_warmup",
        # the official validation: greedy, one answer per question
        "openrlhf_flags": {"eval.temperature": 0.0, "eval.n_samples_per_prompt": 1},
        "agent": {
            "retriever_url": "http://127.0.0.1:8000/retrieve",
            "graph": "parallel",
            "graph_config": {
                "top_k": 3,
                "max_turns": 4,
                "max_new_tokens": 500,
                "prompt_template": "official",
            },
            "reward": {"mode": "paper-strict"},
            "max_observation_tokens": 1000,
        },
    }
    return TrainConfig(**_deep_merge(base, overrides))


#: the over-search penalty of the ``paper-oversearch`` preset, per sub-query beyond the sub-questions
#: a question needs (HiPRAG-style: small beside the outcome's 1 and the search count's 0.35)
OVER_SEARCH_WEIGHT = 0.05


def paper_oversearch_preset(**overrides: Any) -> TrainConfig:
    """The ``paper`` preset with the over-search term on (``agent.reward.weights.lambda_o``): each
    sub-query beyond the sub-questions a question needs (its hops or supporting titles, else two
    for a multi-hop question and one for a single one) costs :data:`OVER_SEARCH_WEIGHT`."""
    on = {"agent": {"reward": {"weights": {"lambda_o": OVER_SEARCH_WEIGHT}}}}
    return paper_preset(**_deep_merge(on, overrides))


PRESETS = {"paper": paper_preset, "paper-oversearch": paper_oversearch_preset}


def _deep_merge(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    out = dict(a)
    for k, v in b.items():
        out[k] = _deep_merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


#: OpenRLHF 0.11.2's dotted flag names that set exactly one field here (``--set rollout.batch_size=64``)
OPENRLHF_NAMES: dict[str, str] = {
    "actor.model_name_or_path": "model",
    "critic.model_name_or_path": "critic_model",
    "data.prompt_dataset": "prompt_data",
    "eval.dataset": "eval_data",
    "data.input_key": "input_key",
    "data.label_key": "label_key",
    "data.apply_chat_template": "apply_chat_template",
    "data.max_samples": "max_samples",
    "data.max_len": "max_len",
    "algo.advantage.estimator": "algorithm",
    "algo.advantage.gamma": "gamma",
    "algo.advantage.lambd": "lambd",
    "rollout.n_samples_per_prompt": "n_samples_per_prompt",
    "rollout.batch_size": "rollout_batch_size",
    "rollout.micro_batch_size": "micro_rollout_batch_size",
    "rollout.max_new_tokens": "max_new_tokens_per_turn",
    "rollout.temperature": "temperature",
    "rollout.top_p": "top_p",
    "train.batch_size": "train_batch_size",
    "train.micro_batch_size": "micro_train_batch_size",
    "train.num_episodes": "num_episodes",
    "train.max_epochs": "max_epochs",
    "train.seed": "seed",
    "train.colocate_all": "colocate_all",
    "train.async_enable": "async_train",
    "actor.adam.lr": "actor_lr",
    "actor.lr_warmup_ratio": "actor_warmup_ratio",
    "actor.lr_scheduler": "lr_scheduler",
    "critic.lr_scheduler": "lr_scheduler",
    "actor.eps_clip": "eps_clip",
    "actor.entropy_coef": "entropy_coef",
    "actor.adam.betas": "adam_betas",
    "critic.adam.betas": "adam_betas",
    "actor.adam.weight_decay": "weight_decay",
    "critic.adam.weight_decay": "weight_decay",
    "algo.advantage.is_correction_threshold": "is_clip",
    "actor.gradient_checkpointing_enable": "gradient_checkpointing",
    "critic.adam.lr": "critic_lr",
    "critic.lr_warmup_ratio": "critic_warmup_ratio",
    "algo.kl.init_coef": "init_kl_coef",
    "algo.kl.use_loss": "use_kl_loss",
    "algo.kl.estimator": "kl_estimator",
    "algo.dynamic_filtering_enable": "dynamic_filtering",
    "algo.dynamic_filtering_range": "dynamic_filtering_range",
    "vllm.num_engines": "vllm_num_engines",
    "vllm.tensor_parallel_size": "vllm_tensor_parallel_size",
    "vllm.gpu_memory_utilization": "vllm_gpu_memory_utilization",
    "ds.zero_stage": "zero_stage",
    "ds.param_dtype": "param_dtype",
    "ds.attn_implementation": "attn_implementation",
    "ds.packing_samples": "packing_samples",
    "ds.adam_offload": "adam_offload",
    "ref.offload": "ref_offload",
    "ckpt.output_dir": "save_path",
    "ckpt.path": "ckpt_path",
    "ckpt.save_steps": "save_steps",
    "ckpt.max_num": "max_ckpt_num",
    "ckpt.save_hf": "save_hf",
    "ckpt.load_enable": "resume",
    "eval.steps": "eval_steps",
    "logger.logging_steps": "logging_steps",
    "logger.wandb.project": "wandb_project",
    "logger.wandb.run_name": "wandb_run_name",
    "logger.tensorboard_dir": "tensorboard_dir",
}


def loopback_endpoint(agent: AgentConfig) -> str | None:
    """``agent.retriever_url: <url>`` (or the Chroma host) when it points at this machine's loopback."""
    import ipaddress
    from urllib.parse import urlsplit

    def loopback(host: str | None) -> bool:
        if not host:
            return False
        if host.lower() in ("localhost", "0.0.0.0"):  # noqa: S104 - a name we compare, not bind
            return True
        try:
            return ipaddress.ip_address(host.strip("[]")).is_loopback
        except ValueError:
            return False

    if agent.retriever_url and loopback(urlsplit(agent.retriever_url).hostname):
        return f"agent.retriever_url {agent.retriever_url} is a loopback address"
    if agent.chroma_host and loopback(agent.chroma_host):
        return f"agent.chroma_host {agent.chroma_host} is a loopback address"
    return None


def parse_overrides(items: list[str]) -> dict[str, Any]:
    """``key.sub=value`` strings -> a nested dict; values as :func:`override_value` reads them.

    OpenRLHF's dotted flag names (:data:`OPENRLHF_NAMES`) are accepted for the fields they set, and
    any other flag OpenRLHF 0.11.2's parser knows goes to ``openrlhf_flags`` as it is.
    """
    out: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"--set expects key=value, got {item!r}")
        node = out
        key = OPENRLHF_NAMES.get(key.strip().removeprefix("--"), key.strip().removeprefix("--"))
        parts = key.split(".")
        if len(parts) > 1 and parts[0] not in TrainConfig.model_fields:
            if key in openrlhf_flag_names():
                out.setdefault("openrlhf_flags", {})[key] = override_value(raw)
                continue
            known = [row[0] for row in flat_keys(TrainConfig)] + list(OPENRLHF_NAMES)
            raise ValueError(f"--set {key}: unknown key{did_you_mean(key, known)}; {LIST_KEYS}")
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        node[parts[-1]] = override_value(raw)
    return out


def openrlhf_flag_names() -> frozenset[str]:
    """The dotted flag names OpenRLHF 0.11.2's ``train_ppo_ray`` parser knows (empty without OpenRLHF)."""
    from parallelsearch.rl.openrlhf_cli import build_parser
    from parallelsearch.stores.errors import UnavailableError

    try:
        parser = build_parser()
    except UnavailableError:
        return frozenset()
    return frozenset(o[2:] for a in parser._actions for o in a.option_strings if o.startswith("--"))


def override_value(raw: str) -> Any:
    """A ``--set`` value: a YAML scalar (``3``, ``true``, ``'x'``) or a flow list/mapping (``[1, 2]``);
    any other text is the string as typed, so ``query: `` (E5's prefix) stays a string, spaces kept."""
    import yaml

    try:
        value = yaml.safe_load(raw)
    except yaml.YAMLError:
        return raw
    if isinstance(value, dict | list) and not raw.strip().startswith(("[", "{")):
        return raw
    return raw if value is None and raw.strip() not in ("null", "~", "") else value


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
        return TrainConfig(**_deep_merge(job_relative(read_config_file(path), Path(path)), extra))
    except ValidationError as e:
        where = f"config {path}" if path else f"preset {preset}"
        raise ValueError(
            f"{where} is invalid: {describe_validation_error(e, TrainConfig, keys_hint=LIST_KEYS)}"
        ) from e


#: the fields a job folder's config names relative to the folder
JOB_PATHS = ("prompt_data", "eval_data", "save_path", "ckpt_path", "tensorboard_dir")


def job_relative(data: dict[str, Any], path: Path) -> dict[str, Any]:
    """A job folder's config (``job_dir: .``, as ``train`` writes it) with its relative paths made
    the folder's, so ``train --config JOB/train_config.yaml`` reads it back from any directory;
    any other config is returned as it is (its paths are the current directory's)."""
    if data.get("job_dir") != ".":
        return data
    folder = path.resolve().parent
    out = {**data, "job_dir": str(folder)}
    for key in JOB_PATHS:
        value = data.get(key)
        if isinstance(value, str) and value and not Path(value).is_absolute() and "://" not in value:
            local = folder / value
            out[key] = str(local) if key not in ("prompt_data", "eval_data") or local.exists() else value
    return out


def flat_keys(
    model: type[BaseModel], prefix: str = "", values: BaseModel | None = None
) -> list[tuple[str, str, Any, str]]:
    """(dotted key, type, default, description) of every field, nested models expanded; with
    ``values`` (an instance, e.g. a preset) its values stand in for the defaults."""
    from pydantic_core import PydanticUndefined

    rows: list[tuple[str, str, Any, str]] = []
    for name, f in model.model_fields.items():
        key = prefix + name
        sub = sub_model(model, name)
        value = getattr(values, name) if values is not None else None
        if sub is not None:
            rows.extend(flat_keys(sub, key + ".", value if isinstance(value, BaseModel) else None))
            continue
        ann = f.annotation
        shown = ann.__name__ if isinstance(ann, type) else str(ann).replace("typing.", "")
        default = "(required)" if f.default is PydanticUndefined and f.default_factory is None else f.default
        if values is not None:
            default = value
        elif f.default_factory is not None:
            try:
                default = f.default_factory()  # type: ignore[call-arg]  # pydantic types default_factory as maybe taking the data
            except TypeError:
                default = "(computed)"
        rows.append((key, shown, default, f.description or ""))
    return rows
