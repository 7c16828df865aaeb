"""The stages of a search with ``#k``: after a stage that is not the last, each dependent
sub-query of the next stage gets its ``#k`` resolved from its parents' results (concurrently),
and the searcher nodes run it like the first stage (docs/architecture.md, "Dependent sub-queries").
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from parallelsearch.agents.resolvers import ParentResult, Resolver, ResolverError
from parallelsearch.graphs.nodes.common import ms_since, passages_of
from parallelsearch.graphs.state import SearchState


def _parents(state: SearchState, rows: list[dict[str, Any]]) -> Any:
    """``parent(k, target)``: what a ``#k`` names, with the gold hop answer when the question has one."""
    act = state["last_action"]
    by_index = {row["index"]: row for row in rows}
    history = state.get("history") or [{}]
    hops = (history[-1].get("metadata") or {}).get("hops") or []

    def parent(k: int, target: int) -> ParentResult:
        row = by_index.get(target) or {"query": act["subqueries"][target], "passages": []}
        hop = hops[k - 1] if 0 < k <= len(hops) and isinstance(hops[k - 1], dict) else {}
        return ParentResult(
            k=k,
            searched=row["query"],
            passages=tuple(passages_of(row)),
            written=act["subqueries"][target],
            gold=str(hop["answer"]) if hop.get("answer") is not None else None,
        )

    return parent


async def _resolve(
    resolver: Resolver,
    act: Mapping[str, Any],
    i: int,
    task: dict[str, Any],
    rows: dict[int, dict],
    parent: Any,
) -> dict[str, Any]:
    """Sub-query ``i``'s task with its ``#k`` resolved, or (a parent or the resolver failed) why
    it is not searched; a resolver that cannot work here raises."""
    written = act["subqueries"][i]
    failed = [(k, t) for k, t in act["refs"][i] if (rows.get(t) or {}).get("error")]
    if failed:
        k, t = failed[0]
        return {**task, "error": f"not searched: #{k} ({rows[t]['query']!r}) failed"}
    try:
        text = await resolver.aresolve(written, [parent(k, t) for k, t in act["refs"][i]])
    except ResolverError:
        raise  # a resolver that cannot work here (gold without hops, a non-text result)
    except Exception as e:  # a model or function that failed this time: the episode goes on
        why = f"not searched: resolving its #k failed ({type(e).__name__}: {e})"
        return {**task, "error": why, "resolved": True}
    query = " ".join(str(text).split())
    if not query:
        raise ResolverError(
            f"resolver {getattr(resolver, 'name', type(resolver).__name__)} turned sub-query "
            f"{written!r} into empty text; it must return the query to search"
        )
    return {**task, "query": query, "resolved": True}


async def next_stage(
    state: SearchState, resolver: Resolver, rows: list[dict[str, Any]], t0: float
) -> dict[str, Any]:
    """The join of a stage that is not the last: the next stage's tasks, for ``after_join`` to
    send. Nothing reaches the transcript yet."""
    act, stage, r = state["last_action"], state.get("stage", 0), state.get("round", 0)
    by_index = {row["index"]: row for row in rows}
    parent = _parents(state, rows)
    base = {"round": r, "top_k": act.get("top_k")}
    tasks = await asyncio.gather(
        *(
            _resolve(resolver, act, i, {"query": act["subqueries"][i], "index": i, **base}, by_index, parent)
            for i in act["stages"][stage + 1]
        )
    )
    calls = sum(1 for t in tasks if t.pop("resolved", False))
    return {
        "stage": stage + 1,
        "next_stage": list(tasks),
        "resolver_calls": state.get("resolver_calls", 0) + calls,
        "node_ms": {"resolve": ms_since(t0)},
    }
