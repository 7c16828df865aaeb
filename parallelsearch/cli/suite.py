"""``parallelsearch eval --suite paper``: the paper's benchmarks through the eval runner for one or
more policies, then the paper's tables over all of them (docs/evaluation.md).

Each (policy, dataset) pair is one eval folder, ``OUT/<policy>/<dataset>``, with its results.jsonl,
so a killed suite resumes where it stopped; the tables are written from those folders at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
from pathlib import Path
from typing import Any

from parallelsearch.cli.common import settings_from_args
from parallelsearch.cli.policy_check import check_policy

#: where the suite's benchmark files are looked for without --data-dir
DEFAULT_DATA_DIR = Path(os.environ.get("PARALLELSEARCH_SHARED_DATA", "../shared/data")) / "raw"


def add_suite_args(p: argparse.ArgumentParser) -> None:
    """The flags only ``--suite`` reads."""
    from parallelsearch.eval.suite import SUITE_NAMES

    p.add_argument("--datasets", help=f"with --suite: comma list of {', '.join(SUITE_NAMES)} (default: all)")
    p.add_argument(
        "--data-dir",
        help="with --suite: the folder of the benchmark files (default: $PARALLELSEARCH_SHARED_DATA/raw, "
        "else ../shared/data/raw)",
    )
    p.add_argument(
        "--corpus",
        choices=["context", "configured"],
        default="context",
        help="with --suite: 'context' searches HotpotQA, 2Wiki and MuSiQue in their own context paragraphs "
        "and the other datasets in --store/--retriever; 'configured' searches every dataset there (wiki-18)",
    )


def _settings_for(args: argparse.Namespace, policy: str | None) -> Any:
    one = argparse.Namespace(**{**vars(args), "policy": policy})
    return settings_from_args(one)


def _configured_searcher(args: argparse.Namespace) -> Any:
    """A builder of the searcher the user configured with --store or --retriever, or None."""
    if not (args.store or args.retriever):
        return None
    from parallelsearch.graphs.factory import make_searcher

    made: list[Any] = []

    def build() -> Any:
        if not made:
            made.append(make_searcher(_settings_for(args, None).retrieval()))
        return made[0]

    return build


def cmd_suite(args: argparse.Namespace) -> int:
    from parallelsearch.cli.eval_run import parse_graphs
    from parallelsearch.eval.suite import SUITE_GRAPHS, pick_datasets, plan_suite

    graphs = parse_graphs(args.graphs or ",".join(SUITE_GRAPHS))
    policies = list(dict.fromkeys(args.policy or [None]))
    for spec in policies:
        check_policy(_settings_for(args, spec).policy_config())
    configured = _configured_searcher(args)
    if args.corpus == "configured" and configured is None:
        raise ValueError("--corpus configured needs --store NAME or --retriever URL (the corpus to search)")
    out = Path(args.out)
    data_dir = Path(args.data_dir) if args.data_dir else DEFAULT_DATA_DIR
    plans = plan_suite(
        pick_datasets(args.datasets),
        data_dir,
        out / "cache",
        limit=args.limit,
        retrieval=_settings_for(args, None).retrieval(),
        configured=configured,
        use_configured_for_all=args.corpus == "configured",
    )
    skipped = [p.skipped for p in plans if p.skipped]
    for line in skipped:
        print(f"not run: {line}", flush=True)
    folders = {}
    for i, spec in enumerate(policies, 1):
        folders[spec] = _run_policy(
            args, spec, graphs, [p for p in plans if not p.skipped], out, f"{i}/{len(policies)}"
        )
    return _write_suite_tables(out, folders, skipped, args)


def _run_policy(
    args: argparse.Namespace, spec: str | None, graphs: list[str], plans: list[Any], out: Path, which: str
) -> dict[str, Path]:
    """Every dataset through ``graphs`` with one policy, built once (a model loads once per policy)
    and run on one event loop (an in-process vLLM engine stays bound to the loop of its first
    request: a loop per dataset would leave it dead after the first); returns dataset -> its folder."""
    settings = _settings_for(args, spec)
    parts = settings.graph_parts(["direct"]) if plans else None
    loop = asyncio.new_event_loop()
    try:
        folders = {
            p.dataset.name: _run_dataset(args, settings, graphs, p, out, which, parts, loop) for p in plans
        }
    finally:
        _close(loop, parts)
    del parts
    gc.collect()  # the policy's model goes before the next policy's loads (one GPU holds one engine)
    return folders


def _close(loop: asyncio.AbstractEventLoop, parts: Any) -> None:
    """The policy's engine stopped (an in-process vLLM engine's), then the loop's leftover tasks (its
    output handler) cancelled and awaited, then the loop closed: nothing left running on a dead loop."""
    shutdown = getattr(getattr(parts, "policy", None), "shutdown", None)
    if callable(shutdown):
        shutdown()
    pending = asyncio.all_tasks(loop)
    for task in pending:
        task.cancel()
    if pending:
        loop.run_until_complete(asyncio.wait(pending))
    loop.close()


def _run_dataset(
    args: argparse.Namespace,
    settings: Any,
    graphs: list[str],
    plan: Any,
    out: Path,
    which: str,
    parts: Any,
    loop: asyncio.AbstractEventLoop,
) -> Path:
    """One dataset's questions through ``graphs`` with the policy's ``parts`` on its ``loop``; its folder."""
    from parallelsearch.cli.eval_run import run_and_report
    from parallelsearch.eval.suite import slug

    folder = out / slug(settings.policy) / plan.dataset.name
    print(
        f"\n[policy {which} {settings.policy}] {plan.dataset.name}: {len(plan.questions)} questions x "
        f"{len(graphs)} graphs -> {folder}",
        flush=True,
    )
    run_and_report(
        plan.questions,
        graphs,
        settings,
        folder,
        dataset=f"{plan.dataset.name}: {plan.dataset.path} (first {args.limit or 'all'})",
        concurrency=args.concurrency,
        turn_delay_ms=args.turn_delay_ms,
        resolver_delay_ms=args.resolver_delay_ms,
        plots=not args.no_plots,
        searcher=plan.searcher,
        max_failed_search_share=args.max_failed_search_share,
        parts=parts,
        loop=loop,
    )
    return folder


def _write_suite_tables(
    out: Path, folders: dict[str | None, dict[str, Path]], skipped: list[str], args: argparse.Namespace
) -> int:
    """The tables over every policy's folders, from their results files (all of each, resumed rows too)."""
    from parallelsearch.eval.paper_tables import build_tables, table1_lines, write_tables
    from parallelsearch.eval.runner import RESULTS, read_results
    from parallelsearch.eval.summary import dedup

    results = {}
    for spec, by_dataset in folders.items():
        label = _settings_for(args, spec).policy
        results[label] = {ds: dedup(read_results(folder / RESULTS)[0]) for ds, folder in by_dataset.items()}
    tables = build_tables(results)
    files = write_tables(out, tables, skipped, plot=not args.no_plots)
    print("\n" + "\n".join(table1_lines(tables)))
    print("\ntables: " + ", ".join(str(f) for f in files))
    return 0
