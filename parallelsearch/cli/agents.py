"""``parallelsearch ask``: one question through a graph, printed readably or as JSON."""

from __future__ import annotations

import argparse
import asyncio
import json
from typing import Any

from parallelsearch.cli.ask_events import event_lines, run_events, stream_events
from parallelsearch.cli.common import (
    add_graph_args,
    add_policy_args,
    add_retrieval_args,
    clean_text_arg,
    settings_from_args,
)
from parallelsearch.cli.policy_check import check_policy
from parallelsearch.graphs.builders import GRAPH_KINDS
from parallelsearch.stores.errors import json_of


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("ask", help="answer one question with a ParallelSearch (or baseline) graph")
    p.add_argument("question")
    add_retrieval_args(p)
    add_policy_args(p)
    p.add_argument("--graph", choices=GRAPH_KINDS, default="parallel", help="which graph (default parallel)")
    add_graph_args(p)
    p.add_argument(
        "--metadata",
        help="JSON object of question metadata (the oracle reads golden_answers, supporting_titles)",
    )
    p.add_argument(
        "--stream",
        action="store_true",
        help="print each step as it happens: the turn, its sub-queries, the passage titles per sub-query, "
        "the answer",
    )
    p.add_argument(
        "--json",
        action="store_true",
        help="print the result as JSON (with --stream: one JSON object per step, with a 'type': turn, "
        "search, answer)",
    )
    p.set_defaults(func=cmd_ask)


def _emit(event: dict[str, Any], as_json: bool) -> None:
    if as_json:
        print(json.dumps(event, ensure_ascii=False, default=str), flush=True)
    else:
        print("\n".join(event_lines(event)), flush=True)


async def _run(args: argparse.Namespace) -> dict[str, Any] | None:
    meta = json_of(args.metadata, "--metadata") if args.metadata else {}
    inp = {"question": clean_text_arg(args.question, "question"), "metadata": meta}
    settings = settings_from_args(args)
    check_policy(settings.policy_config())
    graph = settings.graph_parts([args.graph]).graph(args.graph)
    if args.stream:
        async for event in stream_events(graph, inp):
            _emit(event, args.json)
        return None
    return await graph.ainvoke(inp)


def cmd_ask(args: argparse.Namespace) -> int:
    out = asyncio.run(_run(args))
    if out is None:  # streamed
        return 0
    if args.json:
        print(json.dumps(out, ensure_ascii=False, indent=2, default=str))
    else:
        for event in run_events(out):
            print("\n".join(event_lines(event)))
    return 0
