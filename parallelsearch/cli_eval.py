"""``parallelsearch eval``: graph variants over a question file, with a resumable results folder and a report."""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path
from typing import Any

from parallelsearch.agents.policies import SPEC_HELP
from parallelsearch.graphs import GRAPH_KINDS


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "eval", help="evaluate graph variants on a question file; writes results, summary, report"
    )
    p.add_argument(
        "--dataset", required=True, help="question file (prepare-data output or any benchmark file)"
    )
    p.add_argument("--dataset-name", help="dataset name when the path does not say it (hotpotqa, nq, ...)")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--store", action="append", help="store name (repeat for multi-store routing)")
    src.add_argument("--retriever", help="URL of a Search-R1 /retrieve server")
    p.add_argument("--graphs", default="parallel,sequential", help=f"comma list of {', '.join(GRAPH_KINDS)}")
    p.add_argument("--policy", default="oracle", help=SPEC_HELP)
    p.add_argument("--limit", type=int, help="first N questions (after --split)")
    p.add_argument("--split", choices=["parallel", "sequential", "single", "other"], help="only this split")
    p.add_argument("--out", required=True, help="output folder (re-running resumes)")
    p.add_argument("--concurrency", type=int, default=4, help="questions in flight")
    p.add_argument("--top-k", type=int, default=3)
    p.add_argument("--max-turns", type=int, default=4)
    p.add_argument(
        "--turn-delay-ms", type=float, default=0.0, help="simulated generation time per policy turn"
    )
    p.add_argument(
        "--template",
        help="prompt template for every graph: paper | official | search_r1 (default: each graph's own)",
    )
    p.add_argument("--no-plots", action="store_true")
    p.set_defaults(func=cmd_eval)


def select(questions: list[dict[str, Any]], split: str | None, limit: int | None) -> list[dict[str, Any]]:
    if split:
        questions = [q for q in questions if (q.get("metadata") or {}).get("split") == split]
    return questions[:limit] if limit else questions


def parse_graphs(text: str) -> list[str]:
    graphs = [g.strip() for g in text.split(",") if g.strip()]
    bad = [g for g in graphs if g not in GRAPH_KINDS]
    if bad or not graphs:
        raise ValueError(f"--graphs: unknown graph(s) {bad or text!r}; choose from {', '.join(GRAPH_KINDS)}")
    return graphs


def run_and_report(
    questions: list[dict[str, Any]],
    graphs: list[str],
    policy_spec: str,
    searcher: Any,
    out: Path,
    *,
    dataset: str,
    concurrency: int,
    turn_delay_ms: float,
    plots: bool,
    **graph_config: Any,
) -> dict[str, Any]:
    from parallelsearch.agents.policies import policy_from_spec
    from parallelsearch.eval import comparison_lines, evaluate, write_report

    policy = policy_from_spec(policy_spec)
    run = asyncio.run(
        evaluate(
            questions,
            graphs,
            policy,
            searcher,
            out,
            policy_spec=policy_spec,
            dataset=dataset,
            concurrency=concurrency,
            turn_delay_s=turn_delay_ms / 1000,
            **graph_config,
        )
    )
    summary = write_report(out, plots_enabled=plots)
    if run.skipped_done:
        print(f"resumed: {run.skipped_done} (graph, question) pairs were already done in {out}")
    print(f"ran {run.ran} (graph, question) pairs, {run.failures} failed")
    print("\n".join(comparison_lines(summary, policy_spec.startswith("oracle"))))
    print(f"\nreport: {out / 'report.md'}  (summary.json, results.jsonl, PNG plots beside it)")
    return summary


def cmd_eval(args: argparse.Namespace) -> int:
    from parallelsearch.registry import searcher_for
    from parallelsearch.stores import load_questions

    graphs = parse_graphs(args.graphs)
    questions = select(load_questions(args.dataset, dataset=args.dataset_name), args.split, args.limit)
    if not questions:
        raise ValueError(
            f"{args.dataset} holds no questions{' in split ' + args.split if args.split else ''}"
        )
    run_and_report(
        questions,
        graphs,
        args.policy,
        searcher_for(args.store, args.retriever),
        Path(args.out),
        dataset=str(args.dataset),
        concurrency=args.concurrency,
        turn_delay_ms=args.turn_delay_ms,
        plots=not args.no_plots,
        top_k=args.top_k,
        max_turns=args.max_turns,
        **({"prompt_template": args.template} if args.template else {}),
    )
    return 0
