"""CLI for training: make-train-data, train (OpenRLHF launcher), rollout."""

from __future__ import annotations

import argparse
import asyncio
import json
from pathlib import Path

from parallelsearch.agents.policies.spec import SPEC_HELP
from parallelsearch.cli_common import add_graph_args, add_retrieval_args, settings_from_args
from parallelsearch.graphs.builders import SEARCHING_KINDS
from parallelsearch.rl.rewards import MODES


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("make-train-data", help="FlashRAG question files -> OpenRLHF prompt dataset (jsonl)")
    p.add_argument(
        "files", nargs="+", help="question files from prepare-data (or any benchmark file it reads)"
    )
    p.add_argument("--out", required=True, help="output jsonl")
    p.add_argument("--recipe", choices=["paper"], help="paper: the NQ + HotpotQA mix from the given files")
    p.add_argument(
        "--template", default="paper", help="prompt template: paper | official | search_r1 (default paper)"
    )
    p.add_argument("--tokenizer", help="chat-template the prompts with this Hugging Face tokenizer (path)")
    p.add_argument("--limit", type=int, help="keep at most N prompts (after shuffling)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--skip-bad", action="store_true", help="skip bad records and report them")
    p.set_defaults(func=cmd_make_train_data)

    p = sub.add_parser(
        "train",
        help="launch OpenRLHF PPO/GRPO training with the graph as the environment",
        description="Write a job folder (agent config, resolved training config, agent module, data, "
        "command.sh) and submit it. Recipe: docs/training.md. Keys for --set: train --list-keys.",
    )
    src = p.add_mutually_exclusive_group(required=False)
    src.add_argument("--config", help="training config (YAML/JSON, fields of TrainConfig)")
    src.add_argument("--preset", choices=["paper"], help="paper: the official PPO settings")
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

    p = sub.add_parser("rollout", help="run the training environment with any policy and record episodes")
    p.add_argument("--data", required=True, help="question file (prepare-data output or a benchmark file)")
    p.add_argument("--dataset", help="dataset name when the path does not say it (hotpotqa, nq, ...)")
    p.add_argument("--policy", help=SPEC_HELP + " (default: the settings', oracle)")
    p.add_argument(
        "--constrained",
        action="store_const",
        const=True,
        help="decode every turn under the protocol's grammar",
    )
    add_retrieval_args(p)
    p.add_argument("--out", required=True, help="episodes jsonl")
    p.add_argument("--sft-out", help="write correctly answered episodes as an OpenRLHF SFT dataset")
    p.add_argument("--graph", choices=SEARCHING_KINDS, default="parallel")
    p.add_argument("--reward-mode", choices=MODES, default="paper")
    p.add_argument("--limit", type=int)
    p.add_argument("--concurrency", type=int, default=8)
    add_graph_args(p)
    p.add_argument("--summary-json", help="also write the summary as JSON here")
    p.set_defaults(func=cmd_rollout)


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
    )
    print("\n".join(report.lines()))
    return 0


def add_train_job_args(p: argparse.ArgumentParser) -> None:
    """The job folder, pre-flight and key-listing flags of ``train``."""
    p.add_argument(
        "--runner",
        choices=["ray", "python", "print"],
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
    p.add_argument("--list-keys", action="store_true", help="list every config key with its type and default")


def cmd_train_list_keys(preset: str | None) -> int:
    from parallelsearch.rl.config_errors import flat_keys
    from parallelsearch.rl.train_config import ALGORITHM_ALIASES, OPENRLHF_NAMES, PRESETS, TrainConfig

    rows = flat_keys(TrainConfig, values=PRESETS[preset]() if preset else None)
    print(f"# key  type  = {'the preset ' + preset + ' value' if preset else 'default'}  # what it sets")
    width = max(len(k) for k, *_ in rows)
    for key, type_name, default, desc in rows:
        print(f"{key:<{width}}  {type_name}  = {default!r}" + (f"  # {desc}" if desc else ""))
    aliases = ", ".join(f"{a} -> {b}" for a, b in ALGORITHM_ALIASES.items())
    print(f"\nalgorithm aliases: {aliases}")
    print("OpenRLHF's dotted names accepted by --set: " + ", ".join(f"{k}" for k in OPENRLHF_NAMES))
    return 0


def cmd_train_check(cfg: object, probe: bool) -> int:
    from parallelsearch.rl.preflight import PreflightError, preflight

    try:
        lines = preflight(cfg, probe=probe)  # type: ignore[arg-type]
    except PreflightError as e:
        print(f"check failed: {e}")
        return 1
    for line in lines:
        print(f"ok: {line}")
    return 0


def cmd_train(args: argparse.Namespace) -> int:
    from parallelsearch.rl.launch import launch
    from parallelsearch.rl.train_config import load_train_config

    if args.list_keys:
        return cmd_train_list_keys(args.preset)
    if not (args.config or args.preset):
        raise ValueError("train needs --config FILE or --preset NAME (or --list-keys)")
    cfg = load_train_config(args.config, args.preset, args.set)
    if args.check:
        return cmd_train_check(cfg, probe=not args.skip_probe)
    return launch(cfg, dry_run=args.dry_run, runner=args.runner, probe=not args.skip_probe)


def cmd_rollout(args: argparse.Namespace) -> int:
    from parallelsearch.data import load_questions
    from parallelsearch.graphs.factory import make_policy, make_searcher
    from parallelsearch.rl.env import EnvGraph
    from parallelsearch.rl.rollout import rollout

    s = settings_from_args(args)
    questions = load_questions(args.data, dataset=args.dataset)
    if args.limit:
        questions = questions[: args.limit]
    if not questions:
        raise ValueError(f"{args.data} holds no questions")
    env_graph = EnvGraph(
        make_searcher(s.retrieval()), graph=args.graph, reward_mode=args.reward_mode, config=s.graph
    )
    policy = make_policy(s.policy_config())
    summary = asyncio.run(
        rollout(questions, env_graph, policy, args.out, concurrency=args.concurrency, sft_out=args.sft_out)
    )
    print("\n".join(summary.lines()))
    if args.summary_json:
        Path(args.summary_json).write_text(json.dumps(summary.to_dict(), indent=2))
    return 0 if summary.failures < summary.episodes else 1
