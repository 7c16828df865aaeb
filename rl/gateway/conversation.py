"""The episode as the conversation the agent held shows it: the model's replies as the session
answered them (their tool calls and text), the tool messages the agent sent back for those calls,
and its final reply. The reward then reads what any agent did (LangChain's ``create_agent``, a
hand-written graph), not a record only the project's graph keeps; read with the tools protocol's
own parser, it scores the project's agent as its record does (tests/test_gateway_conversation.py).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from parallelsearch.agents.protocol import DEFAULT_MAX_STAGES, Limits, TurnResult, get_protocol
from parallelsearch.agents.subquery_plan import plan_turn
from parallelsearch.graphs.record import Episode, ObservationRecord, turn_record
from parallelsearch.rl.gateway.messages import _args

#: why a search whose calls no tool message answered is not counted as one
UNANSWERED = "its search calls were never answered by a tool message (the agent stopped there)"
SEARCH_TOOL_NAME = "search"


@dataclass(frozen=True)
class HeldTurn:
    """One model reply as the session answered it (OpenAI's assistant message) and its finish."""

    message: dict[str, Any]
    finish: str


def _result(held: HeldTurn) -> TurnResult:
    calls = [
        {
            "name": (c.get("function") or {}).get("name"),
            "args": _args((c.get("function") or {}).get("arguments")),
            "id": c.get("id"),
            "type": "tool_call",
        }
        for c in held.message.get("tool_calls") or []
    ]
    content = held.message.get("content")
    return TurnResult(
        text=content if isinstance(content, str) else "", finish_reason=held.finish, tool_calls=calls
    )


def conversation_episode(
    turns: Sequence[HeldTurn], answered: Mapping[str, Any], limits: Limits, question: str = ""
) -> Episode:
    """The episode of ``turns`` (in order), a search counted when a tool message answered each of
    its calls (``answered``: tool_call_id -> content); its observation lists the sub-queries
    searched, as the graph's record does for the reward's split."""
    proto = get_protocol("tools")
    records, observations = [], []
    for i, held in enumerate(turns):
        res = _result(held)
        action, plan = plan_turn(proto.parse(res, limits), max_stages=DEFAULT_MAX_STAGES)
        if action.kind == "search" and not all(c["id"] in answered for c in res.tool_calls):
            action, plan = replace(action, kind="invalid", reason=UNANSWERED), None
        problem = proto.format_problem(res.text, action) if action.kind != "invalid" else None
        records.append(
            turn_record(res, action, index=i, final=False, ms=0.0, plan=plan, format_error=problem)
        )
        if action.kind == "search":
            rows = [{"query": q, "error": None, "ms": None, "passages": []} for q in action.subqueries]
            observations.append(
                ObservationRecord(type="observation", round=len(observations), text="", results=rows)
            )  # type: ignore[typeddict-item]
    answer = records[-1]["answer"] if records and records[-1]["action"] == "answer" else None
    return Episode(tuple(records), tuple(observations), answer=answer, question=question, protocol="tools")


def reader_limits(agent_cfg: Any) -> Limits:
    """What a turn may ask for in this run's graph (the conversation reader's limits)."""
    return Limits(max_subqueries=agent_cfg.graph_config.max_subqueries, split=agent_cfg.graph != "sequential")


def unreadable_tools(tools: Any) -> str | None:
    """Why the conversation's searches cannot be read from an agent offering ``tools`` (OpenAI's
    function list of its first model call), or None: the reader needs one ``search`` tool taking a
    ``query`` string, as the project's agent and the README's ``create_agent`` example offer."""
    specs = [t.get("function") or {} for t in tools or () if isinstance(t, dict)]
    names = [s.get("name") for s in specs]
    search = next((s for s in specs if s.get("name") == SEARCH_TOOL_NAME), None)
    if search is None:
        return f"its model is offered no '{SEARCH_TOOL_NAME}' tool (tools: {names or 'none'})"
    props = ((search.get("parameters") or {}).get("properties")) or {}
    if "query" not in props:
        return (
            f"its '{SEARCH_TOOL_NAME}' tool takes no 'query' argument (arguments: {sorted(props) or 'none'})"
        )
    return None
