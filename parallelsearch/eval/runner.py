"""The evaluation runner: graph variants x questions, bounded concurrency, resumable results.

Rows go to ``results.jsonl`` as each question finishes; a re-run into the same folder runs only
the (variant, question) pairs not in it, so a killed run resumes and nothing counts twice.
``run.json`` records what was run; resuming with another policy or dataset is refused.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from typing_extensions import Unpack

from parallelsearch.agents.resolvers import as_resolver, searcher_encoder
from parallelsearch.agents.searchers.backends import as_searcher
from parallelsearch.eval.scoring import error_row, score_output
from parallelsearch.eval.simulated_latency import DelayedPolicy, DelayedResolver
from parallelsearch.eval.summary import is_oracle_run
from parallelsearch.graphs.builders import build_graph, check_graph_kind
from parallelsearch.graphs.config import GraphConfig, GraphOptions

RESULTS = "results.jsonl"
RUN = "run.json"


@dataclass
class EvalRun:
    out_dir: Path
    variants: list[str]
    policy: str
    ran: int = 0
    skipped_done: int = 0
    failures: int = 0
    bad_lines: list[int] = field(default_factory=list)
    oracle: bool = False  # a row's policy labels say "oracle": accuracy means nothing
    first_errors: dict[str, str] = field(default_factory=dict)  # error kind -> first message
    error_counts: dict[str, int] = field(default_factory=dict)  # error kind -> rows
    failed_searches: int = 0  # sub-queries whose search failed (their observation says so)
    searches: int = 0  # sub-queries searched (the failed ones included)


def read_results(path: Path) -> tuple[list[dict[str, Any]], list[int]]:
    """Rows of a results file; a torn last line (killed mid-write) is reported, not fatal."""
    rows: list[dict[str, Any]] = []
    bad: list[int] = []
    if not path.is_file():
        return rows, bad
    with path.open(encoding="utf-8") as f:
        for i, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                bad.append(i)
    return rows, bad


def _end_torn_line(path: Path) -> None:
    """A run killed mid-write leaves a line without its newline: close it so new rows start clean."""
    if path.is_file() and path.stat().st_size:
        with path.open("rb+") as f:
            f.seek(-1, 2)
            if f.read(1) != b"\n":
                f.write(b"\n")


def _check_run(out_dir: Path, info: dict[str, Any]) -> None:
    path = out_dir / RUN
    if path.is_file():
        old = json.loads(path.read_text())
        for key in ("policy", "dataset", "graph_config"):
            if old.get(key) != info.get(key):
                raise ValueError(
                    f"{out_dir} holds results of another run ({key}: {old.get(key)!r} there, {info.get(key)!r} now); "
                    "use another --out folder"
                )
        info = {**old, "variants": sorted(set(old.get("variants", [])) | set(info["variants"]))}
    path.write_text(json.dumps(info, indent=2))


LATENCY_METHOD = (
    "latency = wall time of one graph run (ainvoke), per question; every graph ran the first question once "
    "untimed before timing (model load, ONNX export, store open), and the graphs ran interleaved: question i "
    "by every graph in turn, in alternating order, so a load change lands on all graphs alike"
)


def _graph_input(q: dict[str, Any]) -> dict[str, Any]:
    """A question as a graph's input: the gold answers ride in the metadata (oracle, recall)."""
    meta = {**(q.get("metadata") or {}), "golden_answers": list(q.get("golden_answers") or [])}
    return {"question": q["question"], "metadata": meta}


async def _warm_up(graphs: dict[str, Any], q: dict[str, Any]) -> None:
    """Run each graph once on ``q``, untimed and unrecorded: the first run pays one-off costs."""
    for graph in graphs.values():
        try:
            await graph.ainvoke(_graph_input(q))
        except Exception:  # noqa: BLE001 - the timed run of this question records the error
            pass


async def evaluate(
    questions: Sequence[dict[str, Any]],
    variants: Sequence[str],
    policy: Any,
    searcher: Any,
    out_dir: str | Path,
    *,
    policy_spec: str | None = None,
    answer_policy: Any = None,
    dataset: str | None = None,
    concurrency: int = 4,
    progress: bool = True,
    turn_delay_s: float = 0.0,
    resolver_delay_s: float = 0.0,
    config: GraphConfig | None = None,
    **options: Unpack[GraphOptions],
) -> EvalRun:
    """Run every (variant, question) pair not yet in ``out_dir/results.jsonl``.

    The graphs' knobs: ``config`` and/or :class:`GraphOptions` keywords, as for the builders.
    ``turn_delay_s`` is added to every policy turn and ``resolver_delay_s`` to every ``#k``
    resolver call (simulated model time, so an oracle run's latency columns mean something).
    """
    _check_eval_args(variants, concurrency)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    spec = policy_spec or getattr(policy, "name", type(policy).__name__)
    cfg = (config or GraphConfig()).updated(**options)
    _check_run(
        out,
        {
            "policy": spec,
            "dataset": dataset,
            "graph_config": cfg.model_dump(exclude_unset=True),
            "variants": list(variants),
            "turn_delay_s": turn_delay_s,
            "resolver_delay_s": resolver_delay_s,
            "latency": LATENCY_METHOD,
        },
    )
    done_rows, bad_lines = read_results(out / RESULTS)
    done = {(r.get("variant"), str(r.get("id"))) for r in done_rows if not r.get("error")}
    run = EvalRun(out, list(variants), spec, bad_lines=bad_lines)
    graphs = _build_graphs(variants, policy, searcher, answer_policy, cfg, turn_delay_s, resolver_delay_s)
    todo = _interleaved_todo(questions, variants, done)
    run.skipped_done = len(variants) * len(questions) - len(todo)
    if todo:
        await _warm_up(graphs, todo[0][1])
    await _run_and_record(graphs, todo, run, concurrency, progress)
    run.oracle = is_oracle_run(read_results(out / RESULTS)[0])
    return run


def _check_eval_args(variants: Sequence[str], concurrency: int) -> None:
    """Refuse an empty or unknown variant list and a concurrency below one before anything is written."""
    if not variants:
        raise ValueError("no graph variant to evaluate")
    for v in variants:
        check_graph_kind(v)
    if concurrency < 1:
        raise ValueError("concurrency must be >= 1")


def _build_graphs(
    variants: Sequence[str],
    policy: Any,
    searcher: Any,
    answer_policy: Any,
    cfg: GraphConfig,
    turn_delay_s: float,
    resolver_delay_s: float,
) -> dict[str, Any]:
    """One graph per variant, with the simulated model time wrapped around its policy and resolver."""
    extra: dict[str, Any] = {}
    if resolver_delay_s and searcher is not None:  # the configured resolver, built once to delay each call
        searcher = as_searcher(searcher)
        inner = as_resolver(
            cfg.resolver or "passage",
            searcher=searcher,
            policy=answer_policy or policy,
            embedder=searcher_encoder(searcher),
        )
        extra["resolver"] = DelayedResolver(inner, resolver_delay_s)
        cfg = cfg.model_copy(update={"resolver": None})  # a name would win over the object
    if turn_delay_s:
        policy = DelayedPolicy(policy, turn_delay_s)
    return {
        v: build_graph(v, policy, searcher, answer_policy=answer_policy, config=cfg, **extra)
        for v in variants
    }


def _interleaved_todo(
    questions: Sequence[dict[str, Any]], variants: Sequence[str], done: set[tuple[Any, str]]
) -> list[tuple[str, dict[str, Any]]]:
    """The pairs still to run, question by question; the graphs' order alternates per question, so
    no graph always runs first (and pays for, or profits from, what the one before it left warm)."""
    return [
        (v, q)
        for i, q in enumerate(questions)
        for v in (variants if i % 2 == 0 else variants[::-1])
        if (v, str(q.get("id"))) not in done
    ]


async def _timed_row(graph: Any, variant: str, q: dict[str, Any]) -> dict[str, Any]:
    """One question through one graph, timed and scored; a failure is a row with its error, not a crash."""
    graph_input = _graph_input(q)
    t0 = time.perf_counter()
    try:
        result = await graph.ainvoke(graph_input)
        return score_output(q, result, variant, (time.perf_counter() - t0) * 1000)
    except Exception as e:  # noqa: BLE001 - a failed question is a row with its error
        return error_row(q, variant, f"{type(e).__name__}: {e}"[:500], (time.perf_counter() - t0) * 1000)


def _count_row(run: EvalRun, row: dict[str, Any]) -> None:
    """Add a finished row to the run's tallies, so the report can say what failed and how often."""
    run.ran += 1
    run.failed_searches += int(row.get("search_errors") or 0)
    run.searches += int(row.get("subqueries") or 0)
    if row.get("error"):
        run.failures += 1
        kind = row["error"].split(":", 1)[0]
        run.error_counts[kind] = run.error_counts.get(kind, 0) + 1
        run.first_errors.setdefault(kind, row["error"])


async def _run_and_record(
    graphs: dict[str, Any],
    todo: list[tuple[str, dict[str, Any]]],
    run: EvalRun,
    concurrency: int,
    progress: bool,
) -> None:
    """Run ``todo`` at most ``concurrency`` at a time, appending each row as it finishes, so a
    killed run keeps what it did."""
    from tqdm.auto import tqdm

    sem = asyncio.Semaphore(concurrency)

    async def one(variant: str, q: dict[str, Any]) -> dict[str, Any]:
        async with sem:
            return await _timed_row(graphs[variant], variant, q)

    results = run.out_dir / RESULTS
    _end_torn_line(results)
    with (
        results.open("a", encoding="utf-8") as f,
        tqdm(total=len(todo), disable=not progress, desc=f"eval {','.join(run.variants)}") as bar,
    ):
        # tasks made in order take the semaphore in order (as_completed on bare coroutines would
        # start them in set order, undoing the interleaving)
        for fut in asyncio.as_completed([asyncio.ensure_future(one(v, q)) for v, q in todo]):
            row = await fut
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
            f.flush()
            _count_row(run, row)
            bar.update(1)
