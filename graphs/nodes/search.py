"""Fan-out and fan-in of a search: ``route`` sends one searcher node per sub-query (``Send``), a
searcher node runs its sub-query, ``join`` renders the round's results in sub-query order through
the protocol (or starts the next stage of a search with ``#k``). ``retrieve_once`` is the RAG
baseline's entry: one search of the question itself."""

from __future__ import annotations

import contextlib
import functools
import time
from collections.abc import Sequence
from typing import Any

from langchain_core.messages import AIMessage
from langchain_core.runnables import RunnableConfig
from langgraph.runtime import Runtime
from langgraph.types import Overwrite, Send

from parallelsearch.agents.protocol import Observation, SubqueryResult, content_text, format_tool_response
from parallelsearch.agents.protocol.tools import call_replies
from parallelsearch.agents.searchers.base import guarded_search
from parallelsearch.graphs.config import GraphConfig
from parallelsearch.graphs.engine import EpisodeEngine
from parallelsearch.graphs.nodes.begin_answer import begin
from parallelsearch.graphs.nodes.common import ms_since, name_tool_messages, only_changed, passages_of
from parallelsearch.graphs.nodes.stages import next_stage
from parallelsearch.graphs.nodes.wrapped import listening, tool_call
from parallelsearch.graphs.record import ObservationRecord, ReviewRecord, SearchRecord, review_record
from parallelsearch.graphs.state import JoinView, RouteView, SearchState, SearchTask
from parallelsearch.graphs.turns import after_turn

#: a search task's keys that are not the result row's
_TASK_ONLY = ("top_k", "call", "also", "view", "resolved_stage")


def route(engine: EpisodeEngine, state: SearchState) -> Any:
    """After a turn: the answer node, the planner again, or one ``Send`` per sub-query of the
    search's first stage (a search with ``#k`` sends its later stages from the join)."""
    act = state.get("last_action") or {}
    where = after_turn(act)
    if where != "search":
        return where
    first = act["stages"][0] if act.get("stages") else range(len(act["subqueries"]))
    base = {"round": state.get("round", 0), "top_k": act.get("top_k")}
    wraps = engine.wraps_tools()  # a chat protocol's calls go with their sub-queries: tool events name them
    calls = call_context(engine, state, view=wraps) if wraps or engine.protocol.chat else None
    return [
        Send("search", {"query": act["subqueries"][i], "index": i, **base, **(calls(i) if calls else {})})
        for i in first
    ]


def router(engine: EpisodeEngine) -> Any:
    """``route`` for ``engine``'s graph, reading only :class:`RouteView`'s channels, unless
    ``wrap_tool_call`` middleware read their own state fields with each call."""
    if engine.wraps_tools():
        return functools.partial(route, engine)

    def route_turn(state: RouteView) -> Any:
        return route(engine, state)  # type: ignore[arg-type]  # the channels route reads

    return route_turn


def after_join(state: JoinView) -> Any:
    """The next stage of a search with ``#k`` (its resolved sub-queries, fanned out like the
    first), or the planner once the search is complete."""
    tasks = state.get("next_stage")
    if tasks:
        return [Send("search", dict(t)) for t in tasks]
    return "planner"


def made_call(query: str, round_: int, index: int) -> dict[str, Any]:
    """The ``search`` call a text protocol's sub-query stands for (middleware and tool events see it)."""
    return {"name": "search", "args": {"query": query}, "id": f"search_{round_}_{index}", "type": "tool_call"}


def call_context(engine: EpisodeEngine, state: SearchState, view: bool = True) -> Any:
    """Sub-query i's tool call (the first call that searched it; a text protocol's sub-query gets
    one made for it) and, for ``wrap_tool_call`` middleware (``view``), the state they read.
    Without middleware each call is one tool run, reported by the task of its first sub-query:
    that task's ``also`` holds the duplicate calls its search answers, and a later piece of a
    call split at ``##`` has no call of its own (``None``)."""
    act = state.get("last_action") or {}
    ai = next((m for m in reversed(state.get("messages") or []) if isinstance(m, AIMessage)), None)
    by_id = {c.get("id"): c for c in (ai.tool_calls if ai is not None else [])}
    first: dict[int, Any] = {}
    owner: dict[Any, int] = {}  # each call's first sub-query
    for cid, i in act.get("calls") or []:
        if i is not None and cid in by_id:
            first.setdefault(i, by_id[cid])
            owner.setdefault(cid, i)
    keys = {"messages", *(engine.middleware.state_fields() if engine.middleware else {})}
    seen = {k: state[k] for k in keys if k in state} if view else None  # type: ignore[literal-required]

    def context(i: int) -> dict[str, Any]:
        call = first.get(i) or made_call(act["subqueries"][i], state.get("round", 0), i)
        if view:
            return {"call": call, "view": seen}
        also = [by_id[cid] for cid, j in owner.items() if j == i and cid != call["id"]]
        return {"call": call if owner.get(call["id"], i) == i else None, **({"also": also} if also else {})}

    return context


def _with_calls(
    engine: EpisodeEngine, state: SearchState, tasks: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """A later stage's tasks with their tool calls for ``wrap_tool_call`` middleware, each call
    asking for the resolved query (what the handler searches), not the written ``#k``."""
    context = call_context(engine, state, view=engine.wraps_tools())
    out = []
    for task in tasks:
        ctx = context(task["index"])
        if ctx["call"] is None:  # a piece of a split call: its first piece reports the call
            out.append({**task, **ctx, "resolved_stage": True})
            continue
        call = {**ctx["call"], "args": {**(ctx["call"].get("args") or {}), "query": task["query"]}}
        out.append({**task, **ctx, "call": call, "resolved_stage": True})
    return out


async def _searched(
    engine: EpisodeEngine, row: dict[str, Any], top_k: int, cfg: GraphConfig
) -> dict[str, Any]:
    """``row`` with its query's passages, or the error that stood in for them; timeout and retries
    are the run's (``cfg``), so a knob declared per request acts per request here."""
    row = dict(row)
    if row.get("error"):  # a dependent sub-query whose #k could not be resolved
        row.update(passages=[], attempts=0)
    elif engine.searcher is None:
        row.update(passages=[], error="no searcher configured")
    else:
        async with engine.semaphore() or contextlib.nullcontext():
            outcome = await guarded_search(
                engine.searcher,
                row["query"],
                top_k,
                timeout_s=cfg.search_timeout_s,
                retries=cfg.search_retries,
            )
        row.update(
            passages=[p.to_dict() for p in outcome.passages], error=outcome.error, attempts=outcome.attempts
        )
        if outcome.note:
            row["note"] = outcome.note
        if outcome.content is not None:  # a tool's own text and artifact: its tool message's
            row.update(content=outcome.content, artifact=outcome.artifact)
    return row


async def search(
    engine: EpisodeEngine, task: SearchTask, config: RunnableConfig, runtime: Runtime
) -> dict[str, Any]:
    """One sub-query through the searcher (timeout, retry; inside ``wrap_tool_call`` middleware
    when the graph has some); a failure is the row's ``error``."""
    t0 = time.perf_counter()
    row: dict[str, Any] = {k: v for k, v in task.items() if k not in _TASK_ONLY}
    top_k = task.get("top_k") or engine.cfg.top_k
    cfg = engine.configured(config, runtime)
    wraps = engine.wraps_tools()
    call = task["call"] if "call" in task else made_call(task["query"], task.get("round", 0), task["index"])
    as_call = not task.get("error") and engine.searcher is not None and (wraps or listening(config))
    if (
        as_call and call is not None
    ):  # inside wrap_tool_call middleware, or as its tool's run for the handlers

        async def run(query: str) -> dict[str, Any]:
            return await _searched(engine, {**row, "query": query}, top_k, cfg)

        row = await tool_call(engine, {**task, "call": call}, run, config, runtime)
        row = {k: v for k, v in row.items() if k not in _TASK_ONLY and (wraps or k != "message")}
    else:
        row = await _searched(engine, row, top_k, cfg)
    row["ms"] = ms_since(t0)
    # the join adds the round's searcher milliseconds to node_ms in its own single write
    return {"results": [row]}


def _edit_review(
    state: SearchState, act: dict[str, Any], rows: list[dict[str, Any]], staged: bool
) -> list[ReviewRecord]:
    """A review record when ``wrap_tool_call`` middleware (a reviewer's edit) changed a query
    the planner wrote, so the record keeps the queries that ran; none when a review already
    wrote one for this turn."""
    written = act.get("subqueries") or []
    if staged or all(row["query"] == written[row["index"]] for row in rows if row["index"] < len(written)):
        return []
    turn = state.get("policy_calls", 1) - 1
    if any(e["type"] == "review" and e.get("turn") == turn for e in state.get("trajectory") or []):
        return []
    return [review_record(turn, len(rows), 0)]


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
            row.get("content"),
        )
        for row in rows
    ]


def _keep_artifacts(
    messages: Sequence[Any], calls: list[tuple[str, int | None]], rows: list[dict[str, Any]]
) -> None:
    """Each tool message with its search's artifact (a ``content_and_artifact`` tool's), as
    ``create_agent``'s tool node keeps it (set in place: they are this node's own messages)."""
    artifacts = {row["index"]: row["artifact"] for row in rows if row.get("artifact") is not None}
    if not artifacts:
        return
    index = dict(calls)
    for m in messages:
        i = index.get(getattr(m, "tool_call_id", None))
        if i in artifacts and getattr(m, "artifact", None) is None:
            m.artifact = artifacts[i]


def _wrapped_observation(
    engine: EpisodeEngine,
    calls: list[tuple[str, int | None]],
    rows: list[dict[str, Any]],
    results: list[SubqueryResult],
) -> Observation:
    """The tool messages ``wrap_tool_call`` middleware answered the calls with, one per call (a
    duplicate call gets its sub-query's), and their text form; a row the middleware did not see
    (a ``#k`` that could not be resolved) is rendered as the protocol renders it."""
    from langchain_core.messages import ToolMessage

    by_index = {row["index"]: row.get("message") for row in rows}
    plain = {cid: (text, failed) for cid, text, failed in call_replies(results, calls, engine.style())}
    messages = []
    for cid, i in calls:
        msg = by_index.get(i)
        if not isinstance(msg, ToolMessage):
            text, failed = plain[cid]
            msg = ToolMessage(content=text, tool_call_id=cid, status="error" if failed else "success")
        messages.append(msg.model_copy(update={"tool_call_id": cid}) if msg.tool_call_id != cid else msg)
    text = "".join(format_tool_response(content_text(m.content)) for m in messages) + "\n"
    return Observation(text, tuple(messages))


async def join(
    engine: EpisodeEngine, state: SearchState, config: RunnableConfig, runtime: Runtime
) -> dict[str, Any]:
    t0 = time.perf_counter()
    r = state.get("round", 0)
    rows = sorted((x for x in state.get("results", []) if x.get("round") == r), key=lambda x: x["index"])
    act = state.get("last_action") or {}
    stages: list[list[int]] = act.get("stages") or []
    if state.get("stage", 0) + 1 < len(stages):
        update = await next_stage(state, engine.resolver_for(engine.configured(config, runtime)), rows, t0)
        if engine.wraps_tools() or engine.protocol.chat:
            update["next_stage"] = _with_calls(engine, state, update["next_stage"])
        return update
    calls = [(cid, i) for cid, i in act.get("calls") or []]
    results = _results(act, rows, bool(stages))
    if engine.protocol.chat and any("message" in row for row in rows):
        obs = _wrapped_observation(engine, calls, rows, results)
    else:
        obs = engine.protocol.render(results, calls, engine.style(), state["transcript"])
    entry: ObservationRecord = {
        "type": "observation",
        "round": r,
        "text": obs.text,
        "results": [_search_record(row) for row in rows],
    }
    records: list[Any] = [*_edit_review(state, act, rows, bool(stages)), entry]
    update: dict[str, Any] = {}
    if obs.messages:
        _keep_artifacts(obs.messages, calls, rows)
        ai = next((m for m in reversed(state.get("messages") or []) if isinstance(m, AIMessage)), None)
        name_tool_messages(obs.messages, ai.tool_calls if ai is not None else ())
        update["messages"] = list(obs.messages)
    if stages:  # the round of a search with #k: how many stages it took, and no stage pending
        entry["stages"] = len(stages)
        update.update(stage=0, next_stage=None)
    return only_changed(
        state,
        {
            **update,
            "transcript": state["transcript"] + obs.text,
            "segments": list(state.get("segments") or []) + [("observation", obs.text)],
            "round": r + 1,
            "search_rounds": state.get("search_rounds", 0) + max(len(stages), 1),
            "subqueries": state.get("subqueries", 0) + len(rows),
            "passages": state.get("passages", 0) + sum(len(row["passages"]) for row in rows),
            "errors": state.get("errors", 0) + sum(1 for row in rows if row.get("error")),
            "trajectory": records,
            "node_ms": {"search": sum(row.get("ms") or 0.0 for row in rows), "join": ms_since(t0)},
        },
    )


async def retrieve_once(
    engine: EpisodeEngine, state: SearchState, config: RunnableConfig, runtime: Runtime
) -> dict[str, Any]:
    """RAG baseline: search the question itself once, before the (answer-only) turn."""
    update = await begin(engine, state, config, runtime)
    question = str(update.get("question") or state.get("question") or "").strip()
    top_k = engine.configured(config, runtime).search_top_k(1)
    found = await search(engine, {"query": question, "index": 0, "round": 0, "top_k": top_k}, config, runtime)
    merged = {**state, **update, "results": found["results"]}
    joined = await join(engine, merged, config, runtime)  # type: ignore[arg-type]
    joined["results"] = found["results"]
    if isinstance(update.get("trajectory"), Overwrite):
        # a reset episode: this node's reducer writes replace the old values, not add to them
        for key in ("trajectory", "results", "node_ms"):
            joined[key] = Overwrite(joined[key])
    return {**update, **joined}
