"""When an episode takes another turn and what that turn is asked: the stop condition, the
routing after a turn, and the one place a :class:`TurnRequest` is built (the planner's and the
answer policy's; a trainer receives it whole through the external policy's interrupt)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from parallelsearch.agents.protocol import SearchProtocol, TurnRequest
from parallelsearch.graphs.config import GraphConfig
from parallelsearch.graphs.conversation import chat_messages


def is_final_turn(state: Mapping[str, Any], cfg: GraphConfig) -> bool:
    """The stop condition: after ``max_turns`` policy turns comes one answer-only turn (searching
    is disabled there); an answer ends the episode, and after the final turn it ends anyway."""
    return state.get("policy_calls", 0) >= cfg.max_turns


def after_turn(last_action: Mapping[str, Any]) -> Literal["answer", "search", "planner"]:
    """Where an episode goes after a turn: an answer or the final turn ends it, a search runs,
    an invalid turn (with its corrective note) goes back to the planner."""
    if last_action.get("kind") == "answer" or last_action.get("final"):
        return "answer"
    return "search" if last_action.get("kind") == "search" else "planner"


def turn_request(
    state: Mapping[str, Any],
    cfg: GraphConfig,
    protocol: SearchProtocol,
    *,
    final: bool,
    references: bool = False,
    role: str = "planner",
) -> TurnRequest:
    """The request for the episode's next turn: the transcript (and a chat protocol's messages:
    the system message, the thread's bounded history, the episode, its final-turn note), the
    protocol's stop strings and tools, and the run's limits."""
    history = state.get("history") or [{}]
    messages = None
    if protocol.chat:
        note = protocol.final_note() if final else None
        messages = chat_messages(state, cfg, protocol) + list(note.messages if note else ())
    return TurnRequest(
        transcript=state["transcript"],
        segments=list(state.get("segments") or []),
        stop=protocol.stop,
        max_tokens=cfg.max_new_tokens,
        temperature=cfg.temperature,
        top_p=cfg.top_p,
        turn_index=state.get("policy_calls", 0),
        final=final,
        allow_split=cfg.split_subqueries,
        references=references and cfg.split_subqueries,
        max_subqueries=cfg.max_subqueries,
        max_stages=cfg.max_stages,
        question=state.get("question", ""),
        metadata=dict(history[-1].get("metadata") or {}),  # the episode's (begin consumed the input's)
        role=role,
        protocol=protocol.name,
        tools=protocol.tools,
        messages=messages,
    )
