"""``parallelsearch demo``: the README's main job, offline on a fresh CPU machine.

Indexes the shipped HotpotQA dev sample once (cached under the home), runs it through the parallel
and sequential graphs (the oracle policy unless ``--policy``), and writes the comparison report.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
from pathlib import Path

from parallelsearch.cli.common import add_graph_args, add_policy_args, settings_from_args
from parallelsearch.cli.policy_check import check_policy
from parallelsearch.demo_data import HOTPOTQA_SAMPLE, demo_store
from parallelsearch.settings import get_settings


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("demo", help="offline demo: parallel vs sequential graph on a shipped HotpotQA sample")
    add_policy_args(p)
    add_graph_args(p)
    p.add_argument("--limit", type=int, help="first N of the 200 sample questions (default all)")
    p.add_argument("--out", help="report folder (default: <home>/demo-report/<policy>)")
    p.add_argument("--concurrency", type=int, default=4)
    p.add_argument(
        "--turn-delay-ms", type=float, default=0.0, help="simulated generation time per policy turn"
    )
    p.add_argument(
        "--fresh", action="store_true", help="discard earlier demo results instead of reusing them"
    )
    p.set_defaults(func=cmd_demo)


def report_folder(home: Path, policy: str) -> Path:
    """Where the demo writes its report: one folder per policy, so a model's run keeps the oracle's."""
    return home / "demo-report" / re.sub(r"[^A-Za-z0-9_.-]+", "_", policy)[:60]


def ratio_line(par: dict[str, float], seq: dict[str, float]) -> str:
    """The demo's last line: the parallel graph's policy calls and search rounds per question on
    parallelizable questions, as a share of the sequential graph's."""
    return (
        f"on parallelizable questions the parallel graph needs {par['policy_calls'] / seq['policy_calls']:.2f}x "
        f"the policy calls and {par['search_rounds'] / seq['search_rounds']:.2f}x the search rounds of the sequential one"
    )


def cmd_demo(args: argparse.Namespace) -> int:
    from parallelsearch.agents.searchers import StoreSearcher
    from parallelsearch.cli.eval_run import run_and_report
    from parallelsearch.data import load_questions

    settings = settings_from_args(args)
    check_policy(settings.policy_config())
    store = demo_store(args.limit)
    questions = load_questions(HOTPOTQA_SAMPLE)[: args.limit or None]
    out = Path(args.out) if args.out else report_folder(get_settings().home, settings.policy)
    if args.fresh and out.exists():
        shutil.rmtree(out)
    n_par = sum(q["metadata"]["split"] == "parallel" for q in questions)
    print(
        f"demo: {len(questions)} HotpotQA dev questions ({n_par} parallelizable comparison, "
        f"{len(questions) - n_par} sequential bridge), store {store.name} ({store.count()} passages), "
        f"policy {settings.policy}"
    )
    summary = run_and_report(
        questions,
        ["parallel", "sequential"],
        settings,
        out,
        searcher=StoreSearcher(store),
        dataset="parallelsearch/demo_data/hotpotqa_dev_sample.jsonl",
        concurrency=args.concurrency,
        turn_delay_ms=args.turn_delay_ms,
        plots=True,
    )
    par, seq = summary["parallel"]["parallel"], summary["sequential"]["parallel"]
    if par["policy_calls"] and seq["policy_calls"]:
        print(ratio_line(par, seq))
    (out / "demo.json").write_text(
        json.dumps({"questions": len(questions), "store": store.info()}, indent=2, default=str)
    )
    return 0
