"""Graph state: typed dicts with reducers, and the explicit input/output schemas.

The transcript (prompt, turns and observations as text) is the state that matters. On a
checkpointed thread each run with new input is a new episode: ``begin`` resets the episode's
channels and ``history`` keeps one record per episode (docs/architecture.md, "Threads").
"""

from __future__ import annotations

import operator
from typing import Annotated, Any

from langchain_core.messages import AnyMessage
from langgraph.graph.message import add_messages
from typing_extensions import NotRequired, TypedDict

from parallelsearch.graphs.record import TrajectoryRecord


def sum_ms(left: dict[str, float] | None, right: dict[str, float] | None) -> dict[str, float]:
    """Per-node milliseconds: parallel searcher nodes add into the same key."""
    out = dict(left or {})
    for k, v in (right or {}).items():
        out[k] = round(out.get(k, 0.0) + float(v), 3)
    return out


def merge_episodes(
    left: list[dict[str, Any]] | None, right: list[dict[str, Any]] | None
) -> list[dict[str, Any]]:
    """Episode records of a thread: a record for the episode already last is merged into it
    (the answer node completes what ``begin`` opened); any other record is appended."""
    out = list(left or [])
    for rec in right or []:
        if out and out[-1].get("episode") == rec.get("episode"):
            out[-1] = {**out[-1], **rec}
        else:
            out.append(dict(rec))
    return out


class GraphInput(TypedDict):
    """``{"question": ...}`` or ``{"messages": [...]}`` (a new human message last is the question)."""

    question: NotRequired[str]
    metadata: NotRequired[dict[str, Any]]
    messages: NotRequired[Annotated[list[AnyMessage], add_messages]]


class _Outcome(TypedDict, total=False):
    """What an episode ends with: the keys the output and the state share."""

    protocol: str  # the protocol's registry name: "tags", "tools", "tool_text", ...
    answer: str | None
    status: str  # "answered" | "unanswered"
    transcript: str
    policy: str
    labels: list[str]
    policy_calls: int
    search_rounds: int
    subqueries: int
    resolver_calls: int
    passages: int
    errors: int
    total_ms: float
    tokens_in: int | None
    tokens_out: int | None


class GraphOutput(_Outcome, total=False):
    messages: Annotated[list[AnyMessage], add_messages]  # the input's, then the answer as an AIMessage
    trajectory: list[TrajectoryRecord]
    node_ms: dict[str, float]


class SearchState(_Outcome, total=False):
    # input (``metadata`` is consumed by ``begin``: the episode's copy is in its history record)
    question: str
    metadata: dict[str, Any]
    # the conversation (MessagesState-compatible): questions in, answers out, one per episode
    messages: Annotated[list[AnyMessage], add_messages]
    # the environment's notes to a chat model this episode ([id of the message it follows, the
    # note]): the model reads them in place, a chat UI never sees them
    notes: list[list[Any]] | None
    # the thread: one record per episode (question, metadata, status, answer, counts)
    history: Annotated[list[dict[str, Any]], merge_episodes]
    # the episode
    segments: list[tuple[str, str]]
    trajectory: Annotated[list[TrajectoryRecord], operator.add]
    results: Annotated[list[dict[str, Any]], operator.add]  # fan-in of searcher nodes
    round: int
    last_action: dict[str, Any]
    # a search with #k runs in stages inside its round: the stage searched now, the next one's tasks
    stage: int
    next_stage: list[dict[str, Any]] | None
    started_at: float
    node_ms: Annotated[dict[str, float], sum_ms]


class RouteView(TypedDict, total=False):
    """What routing after a turn reads: a branch that declares it reads these channels only,
    instead of a fresh copy of every channel of the state after each turn."""

    last_action: dict[str, Any]
    round: int
    messages: Annotated[list[AnyMessage], add_messages]


class JoinView(TypedDict, total=False):
    """What routing after a join reads: the next stage of a search with ``#k``, if any."""

    next_stage: list[dict[str, Any]] | None


#: the reducer of each channel whose writes it merges (a write adds to them, whatever its value)
REDUCERS: dict[str, Any] = {
    "messages": add_messages,
    "history": merge_episodes,
    "trajectory": operator.add,
    "results": operator.add,
    "node_ms": sum_ms,
}
REDUCED_KEYS = frozenset(REDUCERS)


class SearchTask(TypedDict):
    """What one ``Send`` hands a searcher node (``error``: a dependent sub-query that is not
    searched, because what its ``#k`` names failed)."""

    query: str
    index: int
    round: int
    error: NotRequired[str]
    #: passages to fetch (``top_k``, or the observation budget's share); not in results
    top_k: NotRequired[int | None]
    #: under ``wrap_tool_call`` middleware: the tool call it sees, the state it reads, and whether
    #: the query is a later ``#k`` stage's resolved text
    call: NotRequired[dict[str, Any]]
    view: NotRequired[dict[str, Any]]
    resolved_stage: NotRequired[bool]


#: the state's and the output's field under ``response_format``: the answer's structured form
STRUCTURED_FIELDS: dict[str, Any] = {"structured_response": Any}


def output_with(fields: dict[str, Any]) -> type:
    """:class:`GraphOutput` with more fields (``structured_response``)."""
    from typing import get_type_hints

    own = get_type_hints(GraphOutput, include_extras=True)
    return TypedDict("GraphOutput", {**own, **fields}, total=False)  # type: ignore[operator]  # a TypedDict built at run time: checkers want literal fields


def state_with(fields: dict[str, Any]) -> type:
    """:class:`SearchState` with more fields (middleware state, and LangChain's ``jump_to``)."""
    from typing import get_type_hints

    from langgraph.channels.ephemeral_value import EphemeralValue

    if not fields:
        return SearchState
    own = get_type_hints(SearchState, include_extras=True)
    extra = {k: v for k, v in fields.items() if k not in own}
    return TypedDict(  # type: ignore[operator]  # a TypedDict built at run time: checkers want literal fields
        "SearchState", {**own, **extra, "jump_to": Annotated[Any, EphemeralValue]}, total=False
    )
