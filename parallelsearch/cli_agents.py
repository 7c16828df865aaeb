"""``parallelsearch ask``: one question through a graph, printed readably or as JSON."""

from __future__ import annotations

import argparse
import asyncio
import json
from typing import Any

from parallelsearch.cli_common import (
    add_graph_args,
    add_graph_kind_arg,
    add_policy_args,
    add_retrieval_args,
    clean_text_arg,
    settings_from_args,
)
from parallelsearch.graphs.state import GraphOutput


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("ask", help="answer one question with a ParallelSearch (or baseline) graph")
    p.add_argument("question")
    add_retrieval_args(p)
    add_policy_args(p)
    add_graph_kind_arg(p)
    add_graph_args(p)
    p.add_argument(
        "--metadata",
        help="JSON object of question metadata (the oracle reads golden_answers, supporting_titles)",
    )
    p.add_argument("--stream", action="store_true", help="print each node's update as it happens")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.set_defaults(func=cmd_ask)


def print_trajectory(out: dict[str, Any]) -> None:
    for step in out.get("trajectory", []):
        if step["type"] == "turn":
            head = f"[turn {step['index'] + 1}{' (final)' if step.get('final') else ''}] {step['action']}"
            if step["subqueries"]:
                head += ": " + " | ".join(step["subqueries"])
            if step.get("answer"):
                head += f" -> {step['answer']}"
            if step.get("reason"):
                head += f" ({step['reason']})"
            print(f"{head}  [{step['ms']:.1f} ms]")
        else:
            print(f"  [search round {step['round'] + 1}]")
            for r in step["results"]:
                mark = (
                    f"ERROR {r['error']}"
                    if r["error"]
                    else ", ".join(
                        f"{p['title']} ({p['score']:.2f})" for p in r["passages"] if p["score"] is not None
                    )
                    or ", ".join(p["title"] for p in r["passages"])
                )
                print(f"    {r['query']!r}: {mark}  [{r['ms']:.1f} ms]")
    labels = f" [{', '.join(out.get('labels', []))}]" if out.get("labels") else ""
    print(f"\nanswer: {out.get('answer')}{labels}")
    print(
        f"policy calls {out['policy_calls']}, search rounds {out['search_rounds']}, sub-queries {out['subqueries']}, "
        f"passages {out['passages']}, errors {out['errors']}, total {out['total_ms']:.0f} ms"
    )


async def _run(args: argparse.Namespace) -> dict[str, Any]:
    from parallelsearch.graphs.factory import make_graphs

    s = settings_from_args(args)
    graph = make_graphs(
        [args.graph],
        policy=s.policy_config(),
        retrieval=s.retrieval(),
        graph=s.graph,
    )[args.graph]
    meta = json.loads(args.metadata) if args.metadata else {}
    if not isinstance(meta, dict):
        raise ValueError("--metadata must be a JSON object")
    inp = {"question": clean_text_arg(args.question, "question"), "metadata": meta}
    if args.stream and not args.json:
        out: dict[str, Any] = {}
        async for mode, chunk in graph.astream(inp, stream_mode=["updates", "values"]):
            if mode == "updates":
                for node, upd in chunk.items():
                    if isinstance(upd, dict):
                        print(f"<{node}> " + ", ".join(f"{k}" for k in upd))
            else:
                out = chunk
        return {k: out.get(k) for k in GraphOutput.__annotations__}
    return await graph.ainvoke(inp)


def cmd_ask(args: argparse.Namespace) -> int:
    out = asyncio.run(_run(args))
    if args.json:
        print(json.dumps(out, ensure_ascii=False, indent=2, default=str))
    else:
        print_trajectory(out)
    return 0
