"""Fan-out and fan-in of a search: ``route`` sends one searcher node per sub-query (``Send``), a
searcher node runs its sub-query, ``join`` renders the round's results in sub-query order through
the protocol (or starts the next stage of a search with ``#k``). ``retrieve_once`` is the RAG
baseline's entry: one search of the question itself."""

from __future__ import annotations

import contextlib
import time
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.runtime import Runtime
from langgraph.types import Overwrite, Send

from parallelsearch.agents.protocol import SubqueryResult
from parallelsearch.agents.searchers.base import guarded_search
from parallelsearch.graphs.engine import EpisodeEngine
from parallelsearch.graphs.nodes.begin_answer import begin
from parallelsearch.graphs.nodes.common import ms_since, passages_of
from parallelsearch.graphs.nodes.stages import next_stage
from parallelsearch.graphs.record import ObservationRecord, SearchRecord
from parallelsearch.graphs.state import SearchState, SearchTask
from parallelsearch.graphs.turns import after_turn


def route(state: SearchState) -> Any:
    """After a turn: the answer node, the planner again, or one ``Send`` per sub-query of the
    search's first stage (a search with ``#k`` sends its later stages from the join)."""
    act = state.get("last_action") or {}
    where = after_turn(act)
    if where != "search":
        return where
    first = act["stages"][0] if act.get("stages") else range(len(act["subqueries"]))
    r, top_k = state.get("round", 0), act.get("top_k")
    return [
        Send("search", {"query": act["subqueries"][i], "index": i, "round": r, "top_k": top_k}) for i in first
    ]


def after_join(state: SearchState) -> Any:
    """The next stage of a search with ``#k`` (its resolved sub-queries, fanned out like the
    first), or the planner once the search is complete."""
    tasks = state.get("next_stage")
    if tasks:
        return [Send("search", dict(t)) for t in tasks]
    return "planner"


async def search(engine: EpisodeEngine, task: SearchTask) -> dict[str, Any]:
    """One sub-query through the searcher (timeout, retry); a failure is the row's ``error``."""
    t0 = time.perf_counter()
    row: dict[str, Any] = {k: v for k, v in task.items() if k != "top_k"}
    top_k = task.get("top_k") or engine.cfg.top_k
    if task.get("error"):  # a dependent sub-query whose #k could not be resolved
        row.update(passages=[], attempts=0)
    elif engine.searcher is None:
        row.update(passages=[], error="no searcher configured")
    else:
        async with engine.semaphore() or contextlib.nullcontext():
            outcome = await guarded_search(
                engine.searcher,
                task["query"],
                top_k,
                timeout_s=engine.cfg.search_timeout_s,
                retries=engine.cfg.search_retries,
            )
        row.update(
            passages=[p.to_dict() for p in outcome.passages], error=outcome.error, attempts=outcome.attempts
        )
        if outcome.note:
            row["note"] = outcome.note
    row["ms"] = ms_since(t0)
    # the join adds the round's searcher milliseconds to node_ms in its own single write
    return {"results": [row]}


def _search_record(row: dict[str, Any]) -> SearchRecord:
    rec: SearchRecord = {
        "query": row["query"],
        "error": row.get("error"),
        "ms": row.get("ms"),
        "passages": [{k: p[k] for k in ("title", "score", "id", "store")} for p in row["passages"]],  # type: ignore[misc]
    }
    if row.get("note"):
        rec["note"] = row["note"]
    return rec


def _results(act: dict[str, Any], rows: list[dict[str, Any]], staged: bool) -> list[SubqueryResult]:
    """The rows as the protocol renders them; a dependent sub-query shows what it was searched as."""
    return [
        SubqueryResult(
            row["query"],
            passages_of(row),
            row.get("error"),
            row["query"] if staged and act["refs"][row["index"]] and not row.get("error") else None,
        )
        for row in rows
    ]


async def join(
    engine: EpisodeEngine, state: SearchState, config: RunnableConfig, runtime: Runtime
) -> dict[str, Any]:
    t0 = time.perf_counter()
    r = state.get("round", 0)
    rows = sorted((x for x in state.get("results", []) if x.get("round") == r), key=lambda x: x["index"])
    act = state.get("last_action") or {}
    stages: list[list[int]] = act.get("stages") or []
    if state.get("stage", 0) + 1 < len(stages):
        return await next_stage(state, engine.resolver_for(engine.configured(config, runtime)), rows, t0)
    calls = [(cid, i) for cid, i in act.get("calls") or []]
    obs = engine.protocol.render(
        _results(act, rows, bool(stages)), calls, engine.style(), state["transcript"]
    )
    entry: ObservationRecord = {
        "type": "observation",
        "round": r,
        "text": obs.text,
        "results": [_search_record(row) for row in rows],
    }
    update: dict[str, Any] = {}
    if obs.messages:
        update["chat"] = [*(state.get("chat") or []), *obs.messages]
    if stages:  # the round of a search with #k: how many stages it took, and no stage pending
        entry["stages"] = len(stages)
        update.update(stage=0, next_stage=None)
    return {
        **update,
        "transcript": state["transcript"] + obs.text,
        "segments": list(state.get("segments") or []) + [("observation", obs.text)],
        "round": r + 1,
        "search_rounds": state.get("search_rounds", 0) + max(len(stages), 1),
        "subqueries": state.get("subqueries", 0) + len(rows),
        "passages": state.get("passages", 0) + sum(len(row["passages"]) for row in rows),
        "errors": state.get("errors", 0) + sum(1 for row in rows if row.get("error")),
        "trajectory": [entry],
        "node_ms": {"search": sum(row.get("ms") or 0.0 for row in rows), "join": ms_since(t0)},
    }


async def retrieve_once(
    engine: EpisodeEngine, state: SearchState, config: RunnableConfig, runtime: Runtime
) -> dict[str, Any]:
    """RAG baseline: search the question itself once, before the (answer-only) turn."""
    update = await begin(engine, state, config, runtime)
    question = str(update.get("question") or state.get("question") or "").strip()
    top_k = engine.configured(config, runtime).search_top_k(1)
    found = await search(engine, {"query": question, "index": 0, "round": 0, "top_k": top_k})
    merged = {**state, **update, "results": found["results"]}
    joined = await join(engine, merged, config, runtime)  # type: ignore[arg-type]
    joined["results"] = found["results"]
    if isinstance(update.get("trajectory"), Overwrite):
        # a reset episode: this node's reducer writes replace the old values, not add to them
        for key in ("trajectory", "results", "node_ms"):
            joined[key] = Overwrite(joined[key])
    return {**update, **joined}
