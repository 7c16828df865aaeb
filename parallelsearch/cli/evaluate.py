"""``parallelsearch eval``: graph variants over a question file, with a resumable results folder and a report."""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from parallelsearch.cli.common import (
    add_failed_share_arg,
    add_graph_args,
    add_policy_args,
    add_retrieval_args,
    retrieval_source,
    settings_from_args,
)
from parallelsearch.cli.policy_check import check_policy
from parallelsearch.cli.suite import add_suite_args
from parallelsearch.graphs.builders import GRAPH_KINDS, check_graph_kind
from parallelsearch.settings import Settings
from parallelsearch.stores.errors import ParallelSearchError

if TYPE_CHECKING:
    from parallelsearch.eval.runner import EvalRun


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


def parse_graphs(text: str) -> list[str]:
    graphs = [g.strip() for g in text.split(",") if g.strip()]
    if not graphs:
        raise ValueError(f"--graphs names no graph; choose from {', '.join(GRAPH_KINDS)}")
    return [check_graph_kind(g) for g in graphs]


class NothingSucceededError(ParallelSearchError, RuntimeError):
    """Every (graph, question) pair of a run failed: the command exits non-zero."""


def run_and_report(
    questions: list[dict[str, Any]],
    graphs: list[str],
    settings: Settings,
    out: Path,
    *,
    dataset: str,
    concurrency: int,
    turn_delay_ms: float,
    plots: bool,
    resolver_delay_ms: float = 0.0,
    searcher: Any = None,
    max_failed_search_share: float | None = None,
    parts: Any = None,
) -> dict[str, Any]:
    """Evaluate ``graphs`` with the settings' policy, searcher (or ``searcher``) and graph config,
    or with ``parts`` already built (a suite's policy, loaded once); past
    ``max_failed_search_share`` of failed searches it raises after writing the report."""
    from parallelsearch.eval import comparison_lines, evaluate, write_report

    parts = parts or settings.graph_parts(graphs, searcher=searcher)
    run = asyncio.run(
        evaluate(
            questions,
            graphs,
            parts.policy,
            searcher if searcher is not None else parts.searcher,
            out,
            policy_spec=settings.policy,
            answer_policy=parts.answer_policy,
            dataset=dataset,
            concurrency=concurrency,
            turn_delay_s=turn_delay_ms / 1000,
            resolver_delay_s=resolver_delay_ms / 1000,
            config=parts.config,
        )
    )
    summary = write_report(out, plots_enabled=plots)
    _print_run_counts(run, out)
    _check_some_succeeded(run, out)
    if run.oracle:
        print(
            "the oracle answers with the gold answer: this run measures efficiency and retrieval, not accuracy"
        )
    print("\n".join(comparison_lines(summary, run.oracle)))
    print(f"\nreport: {out / 'report.md'}  (summary.json, results.jsonl, PNG plots beside it)")
    if max_failed_search_share is not None:
        source = retrieval_source(settings) if searcher is None else "the given searcher"
        _check_failed_share(run, max_failed_search_share, source, out)
    return summary


def _print_run_counts(run: EvalRun, out: Path) -> None:
    """What ran, what was resumed and, on stderr, each kind of error with its first message."""
    if run.skipped_done:
        print(f"resumed: {run.skipped_done} (graph, question) pairs were already done in {out}")
    print(
        f"ran {run.ran} (graph, question) pairs, {run.failures} failed, {run.failed_searches} failed searches"
    )
    if run.failures:
        print("errors by kind:", file=sys.stderr)
        for kind, n in sorted(run.error_counts.items(), key=lambda kv: -kv[1]):
            print(f"  {n} x {kind}; first: {run.first_errors[kind]}", file=sys.stderr)


def _check_some_succeeded(run: EvalRun, out: Path) -> None:
    """Raise when every pair failed, so a run that measured nothing exits non-zero."""
    if run.ran and run.failures == run.ran:
        raise NothingSucceededError(
            f"no question succeeded: all {run.ran} (graph, question) pairs failed "
            f"(first error: {next(iter(run.first_errors.values()), '?')}); details in {out / 'results.jsonl'}"
        )


def _check_failed_share(run: EvalRun, max_share: float, source: str, out: Path) -> None:
    """Raise past ``max_share`` of failed searches, so scores over a broken store do not pass as real."""
    from parallelsearch.rl.search_failures import SearchFailuresError, failed_share_error

    why = failed_share_error(
        run.failed_searches, run.searches, max_share, "--max-failed-search-share", source
    )
    if why:
        raise SearchFailuresError(f"eval: {why} (see search_errors in {out / 'results.jsonl'})")


def cmd_eval(args: argparse.Namespace) -> int:
    from parallelsearch.data import load_questions

    if args.suite:
        from parallelsearch.cli.suite import cmd_suite

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
