"""How one evaluation runs and reports: the graphs named on the command line, the eval runner over
them with the settings' (or given) parts, the report, and the checks that make a run that measured
nothing exit non-zero. ``eval``, ``eval --suite`` and ``demo`` share it."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from parallelsearch.cli.common import retrieval_source
from parallelsearch.graphs.builders import GRAPH_KINDS, check_graph_kind
from parallelsearch.settings import Settings
from parallelsearch.stores.errors import ParallelSearchError

if TYPE_CHECKING:
    from parallelsearch.eval.runner import EvalRun


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
    loop: asyncio.AbstractEventLoop | None = None,
) -> dict[str, Any]:
    """Evaluate ``graphs`` with the settings' policy, searcher (or ``searcher``) and graph config,
    or with ``parts`` already built (a suite's policy, loaded once: then ``loop``, the event loop of
    all its runs, since an in-process vLLM engine binds to the loop of its first request); past
    ``max_failed_search_share`` of failed searches it raises after writing the report."""
    from parallelsearch.eval import comparison_lines, evaluate, write_report

    parts = parts or settings.graph_parts(graphs, searcher=searcher)
    run = (loop.run_until_complete if loop else asyncio.run)(
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
