"""``parallelsearch eval``: graph variants over a question file, with a resumable results folder and a report."""

from __future__ import annotations

import argparse
from pathlib import Path

from parallelsearch.cli.common import (
    add_failed_share_arg,
    add_graph_args,
    add_policy_args,
    add_retrieval_args,
    settings_from_args,
)
from parallelsearch.cli.eval_run import parse_graphs, run_and_report
from parallelsearch.cli.policy_check import check_policy
from parallelsearch.cli.suite import add_suite_args, cmd_suite
from parallelsearch.graphs.builders import GRAPH_KINDS


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "eval", help="evaluate graph variants on a question file; writes results, summary, report"
    )
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument("--dataset", help="question file (prepare-data output or any benchmark file)")
    what.add_argument(
        "--suite",
        choices=["paper"],
        help="the paper's benchmarks and tables (docs/evaluation.md): every dataset with its corpus, "
        "the graphs direct, rag, sequential and parallel unless --graphs, one or more --policy",
    )
    p.add_argument("--dataset-name", help="dataset name when the path does not say it (hotpotqa, nq, ...)")
    add_retrieval_args(p)
    add_policy_args(p, repeat=True)
    p.add_argument(
        "--graphs",
        help=f"comma list of {', '.join(GRAPH_KINDS)} (default: parallel,sequential; with --suite "
        "direct,rag,sequential,parallel)",
    )
    p.add_argument("--limit", type=int, help="first N questions (after --split; per dataset with --suite)")
    add_suite_args(p)
    p.add_argument("--split", choices=["parallel", "sequential", "single", "other"], help="only this split")
    p.add_argument("--out", required=True, help="output folder (re-running resumes)")
    p.add_argument("--concurrency", type=int, default=4, help="questions in flight")
    add_graph_args(p)
    p.add_argument(
        "--turn-delay-ms", type=float, default=0.0, help="simulated generation time per policy turn"
    )
    p.add_argument(
        "--resolver-delay-ms",
        type=float,
        default=0.0,
        help="simulated time per #k resolver call in ms (default 0)",
    )
    p.add_argument("--no-plots", action="store_true")
    add_failed_share_arg(p)
    p.set_defaults(func=cmd_eval)


def cmd_eval(args: argparse.Namespace) -> int:
    from parallelsearch.data import load_questions

    if args.suite:
        return cmd_suite(args)
    policies = args.policy or []
    if len(policies) > 1:
        raise ValueError(f"--policy is given {len(policies)} times: several policies need --suite paper")
    args.policy = policies[0] if policies else None
    graphs = parse_graphs(args.graphs or "parallel,sequential")
    settings = settings_from_args(args)
    check_policy(settings.policy_config())
    questions = load_questions(args.dataset, dataset=args.dataset_name)
    if args.split:
        questions = [q for q in questions if (q.get("metadata") or {}).get("split") == args.split]
    questions = questions[: args.limit or None]
    if not questions:
        raise ValueError(
            f"{args.dataset} holds no questions{' in split ' + args.split if args.split else ''}"
        )
    run_and_report(
        questions,
        graphs,
        settings,
        Path(args.out),
        dataset=str(args.dataset),
        concurrency=args.concurrency,
        turn_delay_ms=args.turn_delay_ms,
        resolver_delay_ms=args.resolver_delay_ms,
        plots=not args.no_plots,
        max_failed_search_share=args.max_failed_search_share,
    )
    return 0
