"""CLI for training: make-train-data, train (OpenRLHF launcher), rollout."""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
from pathlib import Path
from typing import Any

from parallelsearch.cli.common import (
    add_failed_share_arg,
    add_graph_args,
    add_policy_args,
    add_retrieval_args,
    retrieval_source,
    settings_from_args,
)
from parallelsearch.graphs.builders import SEARCHING_KINDS
from parallelsearch.rl.launch import RUNNERS
from parallelsearch.rl.rewards import DEFAULT_TRAIN_MODE, MODES


def register(sub: argparse._SubParsersAction) -> None:
    """The training commands: ``make-train-data``, ``train`` (with its smokes) and ``rollout``."""
    _add_make_train_data_command(sub)
    _add_train_command(sub)
    _add_rollout_command(sub)
    _add_train_health_command(sub)


def _add_train_health_command(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "train-health",
        help="a run's health per step from its episodes' records (agent.health_log), with alarms",
        description="Per step: per question class the decomposition rate, search rounds and sub-queries per "
        "round; over-search; the share of groups whose rewards are all equal; response length, format "
        "validity, truncation; and the alarms that fired (docs/training.md, 'Health and alarms').",
    )
    p.add_argument("folder", help="the agent.health_log folder the rollout actors write")
    p.add_argument(
        "--episodes-per-step",
        type=int,
        required=True,
        help="rollout_batch_size x n_samples_per_prompt (the episodes of one step)",
    )
    p.add_argument("--json", action="store_true", help="one JSON object per step")
    p.set_defaults(func=cmd_train_health)


def cmd_train_health(args: argparse.Namespace) -> int:
    """Print each step's health line (or JSON) and its alarms; exit 1 when an alarm fired."""
    from parallelsearch.rl.health import read_steps

    if args.episodes_per_step < 1:
        raise ValueError(f"--episodes-per-step must be >= 1, got {args.episodes_per_step}")
    if not Path(args.folder).is_dir():
        raise ValueError(f"train-health: {args.folder} is not a folder (agent.health_log names it)")
    steps = read_steps(args.folder, args.episodes_per_step)
    for step in steps:
        print(json.dumps(step.to_dict()) if args.json else step.line())
        for alarm in [] if args.json else step.alarms:
            print(f"  ALARM {alarm}")
    return 1 if any(s.alarms for s in steps) else 0


def _add_make_train_data_command(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("make-train-data", help="FlashRAG question files -> OpenRLHF prompt dataset (jsonl)")
    p.add_argument(
        "files", nargs="+", help="question files from prepare-data (or any benchmark file it reads)"
    )
    p.add_argument("--out", required=True, help="output jsonl")
    p.add_argument("--recipe", choices=["paper"], help="paper: the NQ + HotpotQA mix from the given files")
    p.add_argument(
        "--template",
        default="paper",
        help="prompt template: paper | official | search_r1 | dag (teaches #k), or tool_text for the tool-call text form "
        "(agent.graph_config.protocol: tools) (default paper)",
    )
    p.add_argument("--tokenizer", help="chat-template the prompts with this Hugging Face tokenizer (path)")
    p.add_argument("--limit", type=int, help="keep at most N prompts (after shuffling)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--skip-bad", action="store_true", help="skip bad records and report them")
    p.add_argument(
        "--eval",
        action="store_true",
        help="write OpenRLHF eval records (train's eval_data): their reward is exact match alone, so "
        "OpenRLHF's eval_*_pass1 is EM",
    )
    p.add_argument(
        "--allow-eval-questions",
        action="store_true",
        help="train on questions from evaluation files (test/dev/benchmark in the file name), refused by "
        "default: only for a run whose model is never evaluated on them (a smoke run)",
    )
    p.set_defaults(func=cmd_make_train_data)


def _add_train_command(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "train",
        help="launch OpenRLHF PPO/GRPO training with the graph as the environment",
        description="Write a job folder (agent config, resolved training config, agent module, data, "
        "command.sh) and submit it. Recipe: docs/training.md. Keys for --set: train --list-keys.",
    )
    src = p.add_mutually_exclusive_group(required=False)
    src.add_argument("--config", help="training config (YAML/JSON, fields of TrainConfig)")
    src.add_argument(
        "--preset",
        choices=["paper", "paper-oversearch"],
        help="paper: the official PPO settings; paper-oversearch: the same with the over-search penalty "
        "(agent.reward.weights.lambda_o 0.05 per unneeded sub-query)",
    )
    add_smoke_args(p, src)
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a field (dotted keys, or OpenRLHF's dotted flag names; see --list-keys)",
    )
    p.add_argument(
        "--dry-run", action="store_true", help="print the agent config and the command; write and run nothing"
    )
    add_train_job_args(p)
    p.set_defaults(func=cmd_train)


def _add_rollout_command(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("rollout", help="run the training environment with any policy and record episodes")
    p.add_argument("--data", required=True, help="question file (prepare-data output or a benchmark file)")
    p.add_argument(
        "--config",
        help="a training config (JOB/train_config.yaml): replay its environment exactly (retriever, graph, "
        "reward block, chat template, max_len, per-turn cap, cut-episode rule; tokens always recorded)",
    )
    p.add_argument("--dataset", help="dataset name when the path does not say it (hotpotqa, nq, ...)")
    add_policy_args(p, answer_policy=False)
    add_retrieval_args(p)
    add_engine_args(p)
    p.add_argument("--out", required=True, help="episodes jsonl")
    p.add_argument(
        "--sft-out",
        help="write correctly answered episodes as an OpenRLHF multi-turn SFT dataset (observations "
        "masked out of the loss; the command prints the train_sft flags)",
    )
    p.add_argument(
        "--allow-oracle",
        action="store_true",
        help="let --sft-out write the oracle policy's episodes (refused by default: they copy the gold answer)",
    )
    p.add_argument(
        "--tokens",
        action="store_true",
        help="record each episode's token ids, action mask and log-probs (as the training executor sees them)",
    )
    p.add_argument(
        "--tokenizer",
        help="Hugging Face tokenizer (path) for --tokens (default: the policy's own, e.g. vllm:PATH's)",
    )
    p.add_argument("--graph", choices=SEARCHING_KINDS, help="default parallel")
    p.add_argument(
        "--reward-mode",
        choices=MODES,
        help=f"default {DEFAULT_TRAIN_MODE}; official chat-templates the prompt (the tokenizer's, else ChatML)",
    )
    p.add_argument("--limit", type=int)
    p.add_argument("--concurrency", type=int, default=8)
    add_graph_args(p)
    p.add_argument("--summary-json", help="also write the summary as JSON here")
    add_failed_share_arg(p)
    p.set_defaults(func=cmd_rollout)


def add_smoke_args(p: argparse.ArgumentParser, src: argparse._MutuallyExclusiveGroup) -> None:
    """``train --smoke``: the CPU smoke (parallelsearch/training/one_step.py) and its settings."""
    src.add_argument(
        "--smoke",
        action="store_true",
        help="CPU smoke instead of a launch: OpenRLHF's rollout actor on a real vLLM CPU engine with a "
        "tiny model and a real retriever, the paper preset's agent config (--set on top), the reward terms "
        "and token masks of each episode checked against the engine's turns, one training step, the weights "
        "synced into the engine and checked (needs the vLLM tier: make smoke-train)",
    )
    g = p.add_argument_group("CPU smoke (--smoke)")
    g.add_argument(
        "--learn",
        action="store_true",
        help="with --smoke: a learning run (make smoke-learn): the tiny model warm-started on a teacher's "
        "episodes, RL steps with a weight sync after each, held-out reward before/after and a control run "
        "without learning signal; writes learning.json and learning.svg into --smoke-dir",
    )
    g.add_argument(
        "--smoke-prompts", type=int, help="prompts of the shipped HotpotQA sample (2; not with --learn)"
    )
    g.add_argument(
        "--smoke-samples", type=int, help="samples per prompt (the config's n_samples_per_prompt, 4)"
    )
    p.add_argument(
        "--model",
        help="the policy model: a packaged name (smollm2-135m, converted once under the home), a GGUF file, "
        "a Hugging Face folder or hub id; for a launch the same as --set model=...; for --smoke the model "
        "the smoke trains instead of the tiny one it builds",
    )
    add_learn_args(g)
    g.add_argument(
        "--smoke-retriever",
        metavar="URL",
        help="a running /retrieve server (default: one over the demo store)",
    )
    g.add_argument(
        "--smoke-dir",
        help="keep the model, configs (and with --learn learning.json) here (default: a temporary folder, "
        "deleted; with --learn <home>/smoke-learn)",
    )
    add_engine_args(g)


#: ``train --smoke --learn``'s own flags and their argparse keywords (their defaults: LearnSettings)
LEARN_FLAGS: dict[str, dict[str, Any]] = {
    "--smoke-steps": {
        "type": int,
        "help": "--learn: training steps (20; 15 with --model); 0: the warm start alone (with --model: "
        "zero-shot and after-SFT evaluations)",
    },
    "--smoke-heldout": {"type": int, "help": "--learn: held-out questions (24)"},
    "--smoke-pool": {
        "choices": ["parallel", "all"],
        "help": "--learn: the questions it trains and evaluates on: parallel (the sample's comparison "
        "questions, the default) or all (comparison and bridge)",
    },
    "--smoke-seed": {"type": int, "help": "--learn: the seed of prompt order and sampling (0)"},
    "--smoke-control": {
        "choices": ["group", "step"],
        "help": "--learn: how the control shuffles each step's rewards: among all the step's samples (step, "
        "the default) or among each prompt's samples (group: the run's advantages, given to random episodes)",
    },
    "--smoke-sft-steps": {
        "type": int,
        "help": "--learn: the warm start's SFT steps (150; 60 with --model); 0: none, the model as given is "
        "the start (e.g. --model RUN/checkpoints/warm_start of an earlier run)",
    },
    "--smoke-checkpoints": {
        "action": "store_true",
        "help": "--learn: save the actor after the warm start and after the run as Hugging Face folders "
        "(checkpoints/warm_start, checkpoints/after in the run folder), for --policy vllm:FOLDER",
    },
}


def add_learn_args(g: argparse._ArgumentGroup) -> None:
    """``train --smoke --learn``'s own settings: its length, its questions and its control run."""
    for flag, keywords in LEARN_FLAGS.items():
        g.add_argument(flag, **keywords)


def add_engine_args(p: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    """vLLM engine settings for an in-process engine (``vllm.AsyncEngineArgs``)."""
    p.add_argument(
        "--engine-arg",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a vllm.AsyncEngineArgs field for an in-process vLLM engine (repeatable; values parsed as "
        "YAML: 0.5, true, float32), e.g. gpu_memory_utilization=0.5; merged over "
        "PARALLELSEARCH_VLLM_ENGINE_ARGS (rollout) or the smoke's CPU defaults (train --smoke)",
    )
    p.add_argument(
        "--kv-cache-gib",
        type=float,
        help="the engine's KV cache size in GiB (kv_cache_memory_bytes): on vLLM's CPU backend this also "
        "skips its check that gpu_memory_utilization (0.92) of the node's memory is free",
    )


def engine_args_from(args: argparse.Namespace, base: dict[str, Any] | None = None) -> dict[str, Any]:
    """``base`` with ``--engine-arg KEY=VALUE`` and ``--kv-cache-gib`` over it; errors name the flag."""
    import yaml

    out = dict(base or {})
    for item in args.engine_arg or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"--engine-arg {item!r}: expected KEY=VALUE, e.g. gpu_memory_utilization=0.5")
        out[key.strip()] = yaml.safe_load(value) if value.strip() else value
    if args.kv_cache_gib is not None:
        if args.kv_cache_gib <= 0:
            raise ValueError(f"--kv-cache-gib {args.kv_cache_gib}: must be > 0")
        out["kv_cache_memory_bytes"] = int(args.kv_cache_gib * (1 << 30))
    return out


LEARN_ONLY = tuple(flag[2:].replace("-", "_") for flag in LEARN_FLAGS)
SMOKE_ONLY = (
    "learn",
    "smoke_prompts",
    "smoke_samples",
    *LEARN_ONLY,
    "smoke_retriever",
    "smoke_dir",
    "kv_cache_gib",
    "engine_arg",
)


def _apply(flags: list[str]) -> str:
    return "applies" if len(flags) == 1 else "apply"


def _given(value: object) -> bool:
    """Whether a flag was given: its default is None, an empty list or False (0 is a value)."""
    return not (value is None or value is False or (isinstance(value, list) and not value))


def cmd_train_smoke(args: argparse.Namespace) -> int:
    """``train --smoke``: one checked step, or with ``--learn`` the learning run; exit 1 on a failed check."""
    if args.dry_run:
        raise ValueError("--smoke runs the CPU smoke, not a launch: --dry-run does not apply")
    if args.learn:
        return cmd_train_smoke_learn(args)
    given = [f"--{k.replace('_', '-')}" for k in LEARN_ONLY if _given(getattr(args, k))]
    if given:
        raise ValueError(f"{', '.join(given)} {_apply(given)} only with --learn")
    from parallelsearch.training.one_step import run_smoke

    result = run_smoke(
        prompts=2 if args.smoke_prompts is None else args.smoke_prompts,
        samples=args.smoke_samples,
        overrides=args.set,
        engine_args=engine_args_from(args),
        retriever_url=args.smoke_retriever,
        workdir=args.smoke_dir,
        model=args.model,
    )
    return 0 if result.ok else 1


def cmd_train_smoke_learn(args: argparse.Namespace) -> int:
    """``train --smoke --learn``: the learning run; exit 1 unless every goal of ``learning.json`` is met."""
    from parallelsearch.settings import get_settings
    from parallelsearch.training.learning_loop import REAL_MODEL_LEARN, LearnSettings
    from parallelsearch.training.learning_run import run_learning_smoke

    if args.smoke_prompts is not None:
        raise ValueError(
            "--smoke-prompts does not apply with --learn (it uses --smoke-heldout and the sample)"
        )
    if args.smoke_samples is not None and args.smoke_samples < 1:
        raise ValueError(f"--smoke-samples must be >= 1, got {args.smoke_samples}")
    defaults = LearnSettings(**(REAL_MODEL_LEARN if args.model else {}), model=args.model)
    settings = dataclasses.replace(
        defaults,
        steps=defaults.steps if args.smoke_steps is None else args.smoke_steps,
        heldout=defaults.heldout if args.smoke_heldout is None else args.smoke_heldout,
        pool=args.smoke_pool or defaults.pool,
        seed=defaults.seed if args.smoke_seed is None else args.smoke_seed,
        control_shuffle=args.smoke_control or defaults.control_shuffle,
        sft_steps=defaults.sft_steps if args.smoke_sft_steps is None else args.smoke_sft_steps,
        save_checkpoints=args.smoke_checkpoints,
    )
    samples = [] if args.smoke_samples is None else [f"n_samples_per_prompt={args.smoke_samples}"]
    overrides = [*args.set, *samples]
    record = run_learning_smoke(
        settings,
        overrides=overrides,
        engine_args=engine_args_from(args),
        retriever_url=args.smoke_retriever,
        workdir=args.smoke_dir or get_settings().home / "smoke-learn",
    )
    return 0 if all(record["goals"].values()) else 1


def cmd_make_train_data(args: argparse.Namespace) -> int:
    from parallelsearch.rl.data import make_train_data

    tokenizer = None
    if args.tokenizer:
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(args.tokenizer)
    report = make_train_data(
        args.files,
        args.out,
        recipe=args.recipe,
        template=args.template,
        tokenizer=tokenizer,
        limit=args.limit,
        seed=args.seed,
        skip_bad=args.skip_bad,
        eval_set=args.eval,
        allow_eval_questions=args.allow_eval_questions,
    )
    print("\n".join(report.lines()))
    return 0


def add_train_job_args(p: argparse.ArgumentParser) -> None:
    """The job folder, pre-flight and key-listing flags of ``train``."""
    p.add_argument(
        "--runner",
        choices=RUNNERS,
        default="ray",
        help="ray: write the job folder and `ray job submit` it (default); python: run OpenRLHF on this "
        "machine (one node, no running Ray cluster); print: write the job folder and print its command",
    )
    p.add_argument(
        "--check",
        action="store_true",
        help="run the pre-flight checks (GPU arithmetic, data, reward/prompt agreement, a probe query to "
        "the retriever) and exit: 0 when all pass",
    )
    p.add_argument(
        "--skip-probe",
        action="store_true",
        help="do not send the probe query from this machine (when only the cluster reaches the retriever)",
    )
    p.add_argument(
        "--resume",
        action="store_true",
        help="continue the run whose job folder job_dir is (resume=true: OpenRLHF loads its latest checkpoint); "
        "a job_dir that holds another job is refused without it",
    )
    p.add_argument("--list-keys", action="store_true", help="list every config key with its type and default")


def cmd_train_list_keys(preset: str | None) -> int:
    from parallelsearch.rl.train_config import (
        ALGORITHM_ALIASES,
        OPENRLHF_NAMES,
        PRESETS,
        TrainConfig,
        flat_keys,
    )

    rows = flat_keys(TrainConfig, values=PRESETS[preset]() if preset else None)
    print(f"# key  type  = {'the preset ' + preset + ' value' if preset else 'default'}  # what it sets")
    width = max(len(k) for k, *_ in rows)
    for key, type_name, default, desc in rows:
        print(f"{key:<{width}}  {type_name}  = {default!r}" + (f"  # {desc}" if desc else ""))
    aliases = ", ".join(f"{a} -> {b}" for a, b in ALGORITHM_ALIASES.items())
    print(f"\nalgorithm aliases: {aliases}")
    print("OpenRLHF's dotted names accepted by --set: " + ", ".join(f"{k}" for k in OPENRLHF_NAMES))
    return 0


def cmd_train(args: argparse.Namespace) -> int:
    from parallelsearch.agents.policies.models import resolve_model
    from parallelsearch.rl.launch import launch
    from parallelsearch.rl.train_config import load_train_config

    if args.list_keys:
        return cmd_train_list_keys(args.preset)
    if args.smoke:
        if args.resume:
            raise ValueError("--resume continues a launched job; it does not apply with --smoke")
        return cmd_train_smoke(args)
    given = [f"--{k.replace('_', '-')}" for k in SMOKE_ONLY if _given(getattr(args, k))]
    if given:
        raise ValueError(f"{', '.join(given)} {_apply(given)} only with --smoke")
    if not (args.config or args.preset):
        raise ValueError("train needs --config FILE or --preset NAME (or --list-keys, or --smoke)")
    model = [f"model={args.model}"] if args.model else []
    resume = ["resume=true"] if args.resume else []
    cfg = load_train_config(args.config, args.preset, [*model, *args.set, *resume])
    cfg = cfg.model_copy(
        update={"model": resolve_model(cfg.model, echo=print)}
    )  # a packaged name: its folder
    if args.check:
        from parallelsearch.rl.preflight import NOT_CHECKED, WARNING, PreflightError, preflight

        try:
            lines = preflight(cfg, probe=not args.skip_probe)
        except PreflightError as e:
            print(f"check failed: {e}")
            return 1
        for line in lines:
            print(line if line.startswith((NOT_CHECKED, WARNING)) else f"ok: {line}")
        return 0
    return launch(cfg, dry_run=args.dry_run, runner=args.runner, probe=not args.skip_probe)


def rollout_tokenizer(args: argparse.Namespace, policy: Any, job_model: str | None = None) -> Any:
    """The tokenizer of ``rollout --tokens`` (always with ``--config``): ``--tokenizer``, else the
    policy's own, else (``--config``) the job's actor model's."""
    if args.tokenizer and not (args.tokens or job_model):
        raise ValueError("--tokenizer is for --tokens; add --tokens to record token ids")
    if not (args.tokens or job_model):
        return None
    from transformers import AutoTokenizer

    if args.tokenizer:
        return AutoTokenizer.from_pretrained(args.tokenizer)
    tokenizer = getattr(policy, "tokenizer", None)
    if tokenizer is None and job_model:
        try:
            return AutoTokenizer.from_pretrained(job_model)
        except (OSError, ValueError) as e:
            raise ValueError(
                f"rollout --config: the job's model {job_model} gives no tokenizer here ({e}); name its "
                "Hugging Face folder with --tokenizer PATH"
            ) from e
    if tokenizer is None:
        raise ValueError(
            f"--tokens: the policy {getattr(policy, 'name', policy)!r} has no tokenizer; name one with "
            "--tokenizer PATH (the model's Hugging Face folder)"
        )
    return tokenizer


#: rollout flags a training config gives (refused beside --config: the job's values are replayed)
_JOB_FLAGS = ("store", "retriever", "chroma_host", "graph", "reward_mode")


def _replayed_job(args: argparse.Namespace) -> Any:
    """The job's config that ``rollout --config`` replays: no flag may change its settings, and a
    gateway-mode job (the chat agent, not the text environment) is refused; the job's
    ``agent.health_log`` is the training run's, so a rollout writes nothing there."""
    from parallelsearch.graphs.config import CLI_FLAGS
    from parallelsearch.rl.train_config import load_train_config

    given = [f"--{k.replace('_', '-')}" for k in _JOB_FLAGS if getattr(args, k, None)]
    given += [flag for name, flag in CLI_FLAGS.items() if getattr(args, name, None) is not None]
    if given:
        raise ValueError(f"{', '.join(given)}: rollout --config {args.config} replays the job's own settings")
    cfg = load_train_config(args.config)
    if cfg.agent.mode == "gateway":
        raise ValueError(
            f"rollout --config {args.config}: the job trains with agent.mode=gateway (the chat agent through "
            "the session gateway), which rollout's text environment does not replay; run its episodes with "
            "`train --smoke --learn --set agent.mode=gateway`, or give a job with agent.mode=text"
        )
    return cfg


def rollout_environment(args: argparse.Namespace, s: Any) -> tuple[Any, Any]:
    """The environment and replay of ``rollout``: the job's (``--config``), else the flags' over
    the settings (whose file may not hold a ``reward:`` block: it would not be read)."""
    from parallelsearch.graphs.factory import make_searcher
    from parallelsearch.rl.env import EnvGraph
    from parallelsearch.rl.rollout import Replay

    if args.config:
        cfg = _replayed_job(args)
        agent = cfg.agent
        env_graph = agent.env_graph()
        replay = Replay(
            chat_template=cfg.apply_chat_template,
            max_length=cfg.max_len,
            turn_cap=cfg.max_new_tokens_per_turn,
            cut_episodes=agent.reward.cut_episodes,
            observation_cap=agent.max_observation_tokens,
            training_question=True,
        )
        return env_graph, (replay, cfg.model)
    _no_settings_reward()
    mode = args.reward_mode or DEFAULT_TRAIN_MODE
    env_graph = EnvGraph(
        make_searcher(s.retrieval()), graph=args.graph or "parallel", reward_mode=mode, config=s.graph_config
    )
    return env_graph, (Replay(chat_template=mode == "official"), None)


def _no_settings_reward() -> None:
    """A settings file with a ``reward:`` block is refused: the settings carry no reward, and a
    block read by nothing would silently score with another reward."""
    from parallelsearch.rl.agent_config import read_config_file
    from parallelsearch.settings import _config_file

    path = _config_file()
    if path is not None and path.suffix.lower() in (".yaml", ".yml", ".json"):
        if "reward" in read_config_file(path):
            raise ValueError(
                f"{path} (the settings file) holds a reward: block, which rollout does not read from settings; "
                "give the job's config with rollout --config JOB/train_config.yaml, or --reward-mode"
            )


def cmd_rollout(args: argparse.Namespace) -> int:
    import dataclasses

    from parallelsearch.data import load_questions
    from parallelsearch.graphs.factory import make_policy
    from parallelsearch.rl.rollout import rollout

    s = settings_from_args(args)
    if args.engine_arg or args.kv_cache_gib is not None:
        s = s.model_copy(update={"vllm_engine_args": engine_args_from(args, s.vllm_engine_args)})
    questions = load_questions(args.data, dataset=args.dataset)
    if args.limit:
        questions = questions[: args.limit]
    if not questions:
        raise ValueError(f"{args.data} holds no questions")
    env_graph, (replay, job_model) = rollout_environment(args, s)
    policy = make_policy(s.policy_config())
    tokenizer = rollout_tokenizer(args, policy, job_model)
    replay = dataclasses.replace(replay, tokenizer=tokenizer)
    summary = asyncio.run(
        rollout(
            questions,
            env_graph,
            policy,
            args.out,
            concurrency=args.concurrency,
            sft_out=args.sft_out,
            allow_oracle=args.allow_oracle,
            replay=replay,
        )
    )
    print("\n".join(summary.lines()))
    if summary.sft_written:
        from parallelsearch.rl.rollout import SFT_FLAGS

        print(f"SFT: openrlhf.cli.train_sft --data.dataset {args.sft_out} {SFT_FLAGS}")
    if args.summary_json:
        Path(args.summary_json).write_text(json.dumps(summary.to_dict(), indent=2))
    from parallelsearch.rl.search_failures import SearchFailuresError, failed_share_error

    share = args.max_failed_search_share
    why = failed_share_error(
        summary.failed_searches, summary.searches, share, "--max-failed-search-share", retrieval_source(s)
    )
    if why:
        raise SearchFailuresError(f"rollout: {why}")
    return 0 if summary.failures < summary.episodes else 1
