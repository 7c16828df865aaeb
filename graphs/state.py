"""Graph state: typed dicts with reducers, and the explicit input/output schemas.

The transcript (prompt + every turn + every observation, as text) is the state that
matters; counts, timings and the readable trajectory live beside it.
"""

from __future__ import annotations

import operator
from typing import Annotated, Any

from typing_extensions import NotRequired, TypedDict


def sum_ms(left: dict[str, float] | None, right: dict[str, float] | None) -> dict[str, float]:
    """Per-node milliseconds: parallel searcher nodes add into the same key."""
    out = dict(left or {})
    for k, v in (right or {}).items():
        out[k] = round(out.get(k, 0.0) + float(v), 3)
    return out


class GraphInput(TypedDict):
    question: str
    metadata: NotRequired[dict[str, Any]]


class GraphOutput(TypedDict, total=False):
    answer: str | None
    status: str  # "answered" | "unanswered"
    transcript: str
    trajectory: list[dict[str, Any]]
    policy: str
    labels: list[str]
    policy_calls: int
    search_rounds: int
    subqueries: int
    passages: int
    errors: int
    node_ms: dict[str, float]
    total_ms: float
    tokens_in: int | None
    tokens_out: int | None


class SearchState(TypedDict, total=False):
    # input
    question: str
    metadata: dict[str, Any]
    # the episode
    transcript: str
    segments: list[tuple[str, str]]
    trajectory: Annotated[list[dict[str, Any]], operator.add]
    results: Annotated[list[dict[str, Any]], operator.add]  # fan-in of searcher nodes
    round: int
    last_action: dict[str, Any]
    started_at: float
    # output
    answer: str | None
    status: str
    policy: str
    labels: list[str]
    policy_calls: int
    search_rounds: int
    subqueries: int
    passages: int
    errors: int
    node_ms: Annotated[dict[str, float], sum_ms]
    total_ms: float
    tokens_in: int | None
    tokens_out: int | None


class SearchTask(TypedDict):
    """What one ``Send`` hands a searcher node."""

    query: str
    index: int
    round: int
