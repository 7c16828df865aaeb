"""``parallelsearch ask``: one question through a graph, printed readably or as JSON."""

from __future__ import annotations

import argparse
import asyncio
import json
from typing import Any

from parallelsearch.agents.policies import SPEC_HELP, policy_from_spec
from parallelsearch.graphs import GRAPH_KINDS, build_graph


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("ask", help="answer one question with a ParallelSearch (or baseline) graph")
    p.add_argument("question")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--store", action="append", help="store name (repeat for multi-store routing)")
    src.add_argument("--retriever", help="URL of any Search-R1 /retrieve server")
    p.add_argument("--policy", default=None, help=SPEC_HELP + " (default from settings: oracle)")
    p.add_argument("--graph", choices=GRAPH_KINDS, default="parallel")
    p.add_argument("--top-k", type=int, default=3)
    p.add_argument("--max-turns", type=int, default=4)
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
    from parallelsearch.registry import searcher_for
    from parallelsearch.settings import get_settings

    settings = get_settings()
    policy = policy_from_spec(
        args.policy or settings.policy, base_url=settings.openai_base_url, api_key=settings.openai_api_key
    )
    graph = build_graph(
        args.graph,
        policy,
        searcher_for(args.store, args.retriever, settings=settings),
        top_k=args.top_k,
        max_turns=args.max_turns,
    )
    meta = json.loads(args.metadata) if args.metadata else {}
    if not isinstance(meta, dict):
        raise ValueError("--metadata must be a JSON object")
    inp = {"question": args.question, "metadata": meta}
    if args.stream and not args.json:
        out: dict[str, Any] = {}
        async for mode, chunk in graph.astream(inp, stream_mode=["updates", "values"]):
            if mode == "updates":
                for node, upd in chunk.items():
                    if isinstance(upd, dict):
                        print(f"<{node}> " + ", ".join(f"{k}" for k in upd))
            else:
                out = chunk
        return {
            k: out.get(k)
            for k in (
                "answer",
                "status",
                "transcript",
                "trajectory",
                "policy",
                "labels",
                "policy_calls",
                "search_rounds",
                "subqueries",
                "passages",
                "errors",
                "node_ms",
                "total_ms",
                "tokens_in",
                "tokens_out",
            )
        }
    return await graph.ainvoke(inp)


def cmd_ask(args: argparse.Namespace) -> int:
    out = asyncio.run(_run(args))
    if args.json:
        print(json.dumps(out, ensure_ascii=False, indent=2, default=str))
    else:
        print_trajectory(out)
    return 0
