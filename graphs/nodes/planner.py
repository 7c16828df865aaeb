"""The planner node: one policy turn, read by the graph's protocol into an action, planned (a
search with ``#k`` gets its stages), recorded, and written into the transcript with the
corrective note an invalid turn gets."""

from __future__ import annotations

import time
import uuid
from collections.abc import Sequence
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.runtime import Runtime

from parallelsearch.agents.protocol import Action, Limits, Observation, TurnResult, content_text
from parallelsearch.agents.subquery_plan import Plan, plan_turn
from parallelsearch.graphs.config import GraphConfig
from parallelsearch.graphs.engine import EpisodeEngine
from parallelsearch.graphs.nodes.common import ms_since, name_tool_messages, only_changed, usage_update
from parallelsearch.graphs.nodes.wrapped import model_turn
from parallelsearch.graphs.record import TurnRecord, review_record, turn_record
from parallelsearch.graphs.state import SearchState
from parallelsearch.graphs.structured import StructuredTurn
from parallelsearch.graphs.turns import is_final_turn, turn_request


def next_action(turn: TurnRecord, action: Action, plan: Plan | None, cfg: GraphConfig) -> dict[str, Any]:
    """What routing and the searcher nodes read of the turn (``last_action``): the action, its
    tool calls, a ``#k`` plan's stages and references, and the passages each sub-query fetches."""
    act: dict[str, Any] = {
        "kind": turn["action"],
        "subqueries": list(action.subqueries),
        "answer": action.answer,
        "final": turn["final"],
        "calls": [[c.id, c.index] for c in action.calls],
        "top_k": cfg.search_top_k(len(action.subqueries)),
    }
    if plan is not None:  # only a search with #k carries a plan: any other is as it always was
        act["stages"] = [list(s) for s in plan.stages]
        act["refs"] = [[[r.k, r.target] for r in refs] for refs in plan.references]
    return act


#: what each call still unanswered when the episode ends is answered with (the final turn's, or a
#: turn a middleware ended the run after)
NOT_SEARCHED_FINAL = "Not searched: the turn limit (max_turns) was reached; the episode ends here."


def not_searched(messages: Sequence[Any]) -> list[Any]:
    """A tool message for each call of the last AI message in ``messages`` that no tool message
    answered: a strict chat API refuses a history with a call left unanswered (a larger graph
    sends this one on). Written by the answer node, after any reviewer answered some."""
    from langchain_core.messages import AIMessage, ToolMessage

    at = next((i for i in range(len(messages) - 1, -1, -1) if isinstance(messages[i], AIMessage)), None)
    if at is None:
        return []
    answered = {m.tool_call_id for m in messages[at + 1 :] if isinstance(m, ToolMessage)}
    return [
        ToolMessage(content=NOT_SEARCHED_FINAL, tool_call_id=c["id"], name=c.get("name"), status="error")
        for c in messages[at].tool_calls
        if c.get("id") not in answered
    ]


def _named(message: Any, name: str) -> Any:
    """An AI message with the graph's name, as ``create_agent`` names its model's replies, and an
    id (the reply is the model's own new object: named in place, not copied)."""
    from langchain_core.messages import AIMessage

    if isinstance(message, AIMessage):
        message.name = name
        if message.id is None:  # the notes name the message they follow
            message.id = str(uuid.uuid4())
    return message


def _said(
    engine: EpisodeEngine, res: TurnResult, action: Action, final: bool
) -> tuple[Observation, Observation]:
    """The turn as the transcript keeps it, and the corrective note it gets (empty when valid;
    the final turn gets none: the episode ends there)."""
    said = engine.protocol.written(res)
    if action.kind == "invalid" and not final:
        return said, engine.protocol.feedback(res, action)
    return said, Observation()


def _read(engine: EpisodeEngine, res: TurnResult, cfg: GraphConfig) -> tuple[Action, StructuredTurn | None]:
    """The turn's action: under ``response_format`` a structured answer (or its refusal) when the
    turn gives one, else what the protocol reads."""
    structured = engine.structured.read(res) if engine.structured is not None else None
    if structured is not None and structured.action is not None:
        return structured.action, structured
    return engine.protocol.parse(res, Limits(cfg.max_subqueries, cfg.split_subqueries)), structured


async def planner(
    engine: EpisodeEngine, state: SearchState, config: RunnableConfig, runtime: Runtime
) -> dict[str, Any]:
    t0 = time.perf_counter()
    cfg = engine.configured(config, runtime)
    st: dict[str, Any] = state  # type: ignore[assignment]
    if not st.get("transcript"):
        raise RuntimeError("the planner ran before an episode began (wire START -> begin -> planner)")
    final = is_final_turn(st, cfg)
    request = turn_request(st, cfg, engine.protocol, final=final, references=engine.references)
    if engine.structured is not None:
        request = engine.structured.request(request)
    res = await model_turn(engine, request, st, runtime)
    action, structured = _read(engine, res, cfg)
    action, plan = plan_turn(action, max_stages=cfg.max_stages, final=final)
    said, note = _said(engine, res, action, final)
    if structured is not None and structured.replies:  # the output tool's calls are answered here
        note = Observation(messages=structured.replies)
    problem = engine.protocol.format_problem(said.text, action) if action.kind != "invalid" else None
    turn = turn_record(
        res,
        action,
        index=st["policy_calls"],
        final=final,
        ms=ms_since(t0),
        plan=plan,
        format_error=problem,
        feedback=note.text,
    )
    update: dict[str, Any] = {
        "transcript": st["transcript"] + said.text + note.text,
        "segments": [
            *st["segments"],
            ("policy", said.text),
            *([("feedback", note.text)] if note.text else []),
        ],
        "policy_calls": st["policy_calls"] + 1,
        "last_action": next_action(turn, action, plan, cfg),
        "trajectory": [turn],
        "node_ms": {"planner": turn["ms"]},
        **usage_update(st, res),
        **(structured.state() if structured is not None else {}),
    }
    if said.messages or note.messages:  # a chat protocol: the conversation is the record
        update.update(_conversation(engine, st, said, note, action))
    if action.kind == "answer":
        update["answer"] = action.answer
    return only_changed(st, update)


def _conversation(
    engine: EpisodeEngine, st: dict[str, Any], said: Observation, note: Observation, action: Action
) -> dict[str, Any]:
    """A chat protocol's turn as messages: the model's, named after the graph; the tool replies,
    named after their calls; and notes to the model apart, since a note is not a turn of the
    conversation."""
    named = [_named(m, engine.graph_name) for m in said.messages]
    if action.kind == "answer" and engine.answer_policy is None and named:
        # the answer's status is on it as it is written: the answer node need not write it again
        named[-1].response_metadata = {**(named[-1].response_metadata or {}), "status": "answered"}
    name_tool_messages(note.messages, [c for m in named for c in getattr(m, "tool_calls", None) or []])
    out: dict[str, Any] = {"messages": [*named, *(m for m in note.messages if m.type == "tool")]}
    notes = [[named[-1].id if named else None, m] for m in note.messages if m.type != "tool"]
    if notes:
        out["notes"] = [*(st.get("notes") or []), *notes]
    return out


def _second_answers(replies: Sequence[Any]) -> list[Any]:
    """Removals of the tool messages among ``replies`` that answer a call answered before them."""
    from langchain_core.messages import RemoveMessage

    seen: set[str] = set()
    twice = []
    for m in replies:
        if getattr(m, "type", None) == "tool":
            if m.tool_call_id in seen and m.id is not None:
                twice.append(RemoveMessage(id=m.id))
            seen.add(m.tool_call_id)
    return twice


async def review(
    engine: EpisodeEngine, state: SearchState, config: RunnableConfig, runtime: Runtime
) -> dict[str, Any]:
    """After ``after_model`` middleware: the search runs the calls a reviewer left without an
    answer (``HumanInTheLoopMiddleware`` answers a rejected call with its tool message); when
    none is left, the planner goes on with the reviewer's answers. A reviewer's answer to a call
    the planner had answered already (an invalid or structured turn's) is dropped: a call has one."""
    from langchain_core.messages import AIMessage, ToolMessage

    act = state.get("last_action") or {}
    messages = state.get("messages") or []
    at = next((i for i in range(len(messages) - 1, -1, -1) if isinstance(messages[i], AIMessage)), None)
    if at is None or not engine.protocol.chat:
        return {}
    twice = _second_answers(messages[at + 1 :])
    if twice:
        return {"messages": twice}
    if act.get("kind") != "search":
        return {}
    ai = messages[at]
    answered = {m.tool_call_id for m in messages[at + 1 :] if isinstance(m, ToolMessage)}
    pending = [c for c in ai.tool_calls if c.get("id") not in answered]
    if [c.get("id") for c in pending] == [cid for cid, _ in act.get("calls") or []]:
        return {}  # nothing answered by the reviewer (an edit is applied when the call runs)
    rejected = len(ai.tool_calls) - len(pending)
    turn_index = state.get("policy_calls", 1) - 1
    if not pending:
        return {
            "last_action": {**act, "kind": "reviewed", "subqueries": [], "calls": []},
            "trajectory": [review_record(turn_index, 0, rejected)],
        }
    cfg = engine.configured(config, runtime)
    res = TurnResult(text=content_text(ai.content), tool_calls=pending, message=ai)
    action = engine.protocol.parse(res, Limits(cfg.max_subqueries, cfg.split_subqueries))
    action, plan = plan_turn(action, max_stages=cfg.max_stages)
    turn: Any = {"action": action.kind, "final": act.get("final", False)}
    return {
        "last_action": next_action(turn, action, plan, cfg),
        "trajectory": [review_record(turn_index, len(pending), rejected)],
    }
