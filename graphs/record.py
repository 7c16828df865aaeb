"""The episode record: what the engine writes of each turn and each search, and the typed view of
a whole episode that every consumer reads (the RL environment, the executor, rollouts, rewards,
eval, thread history, the page and ``ask --stream``; docs/architecture.md, "The episode record").
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeAlias

from typing_extensions import NotRequired, TypedDict

from parallelsearch.agents.protocol import Action, TurnResult
from parallelsearch.agents.subquery_plan import Plan


class PassageRecord(TypedDict):
    """A passage as the record keeps it (its text is in the observation)."""

    title: str
    score: float | None
    id: str
    store: str | None


class SearchRecord(TypedDict):
    """One sub-query's search (``note``: how a ``#k`` was resolved or which shard was missing)."""

    query: str
    error: str | None
    ms: float | None
    passages: list[PassageRecord]
    note: NotRequired[str]


class TurnRecord(TypedDict):
    """One policy turn: what the policy wrote, the action parsed from it, and what it got back."""

    type: Literal["turn"]
    index: int  # policy calls before this one
    final: bool
    text: str
    action: str  # "search" | "answer" | "invalid"; "reviewed" in the typed view: a search a reviewer rejected whole
    subqueries: list[str]
    answer: str | None
    reason: str | None  # why the turn is invalid
    finish_reason: str
    ms: float
    labels: list[str]
    role: NotRequired[Literal["answer"]]  # the answer policy's turn (a planner's has no role)
    stages: NotRequired[list[list[int]]]  # a search with #k: the sub-queries of each stage
    references: NotRequired[list[list[list[int]]]]  # per sub-query its [k, target] references
    calls: NotRequired[list[list[Any]]]  # tool calls: [tool_call_id, sub-query index or None]
    format_error: NotRequired[str]  # why a valid turn breaks the protocol's strict format
    feedback: NotRequired[str]  # the corrective note of an invalid turn, as the policy read it
    message_id: NotRequired[str]  # a chat model's reply's id (the id of its streamed chunks)
    written_subqueries: NotRequired[list[str]]  # a reviewed search: what the policy wrote


class ObservationRecord(TypedDict):
    """One search: the observation as rendered, and each sub-query's search."""

    type: Literal["observation"]
    round: int
    text: str
    results: list[SearchRecord]
    stages: NotRequired[int]  # a search with #k: how many stages it took


class ReviewRecord(TypedDict):
    """A reviewer's decisions on a search (human review middleware): how many of its calls still
    run and how many the reviewer answered instead (what ran, edits included, is the search's
    observation record)."""

    type: Literal["review"]
    turn: int  # the reviewed turn's ``index``
    kept: int
    rejected: int


TrajectoryRecord: TypeAlias = TurnRecord | ObservationRecord | ReviewRecord

#: why the last turn of a search in the final turn is invalid
FINAL_SEARCH_REASON = "searching is disabled in the final turn"


def turn_record(
    res: TurnResult,
    action: Action,
    *,
    index: int,
    final: bool,
    ms: float,
    plan: Plan | None = None,
    format_error: str | None = None,
    feedback: str | None = None,
) -> TurnRecord:
    """The record of one policy turn (a search in the final turn is invalid)."""
    kind = "invalid" if final and action.kind == "search" else action.kind
    rec: TurnRecord = {
        "type": "turn",
        "index": index,
        "final": final,
        "text": res.text if isinstance(res.text, str) else "",
        "action": kind,
        "subqueries": list(action.subqueries),
        "answer": action.answer,
        "reason": action.reason
        if action.kind == "invalid"
        else (FINAL_SEARCH_REASON if kind == "invalid" else None),
        "finish_reason": res.finish_reason or "stop",
        "ms": ms,
        "labels": list(res.labels),
    }
    if plan is not None:
        rec["stages"] = [list(s) for s in plan.stages]
        rec["references"] = [[[r.k, r.target] for r in refs] for refs in plan.references]
    if action.calls:
        rec["calls"] = [[c.id, c.index] for c in action.calls]
    if format_error is not None and kind != "invalid":
        rec["format_error"] = format_error
    if feedback:
        rec["feedback"] = feedback
    if getattr(res.message, "id", None):
        rec["message_id"] = res.message.id
    return rec


@dataclass(frozen=True)
class Episode:
    """One episode as its record holds it: the policy's turns, the searches, the answer.

    Built from a graph's state or output (:meth:`from_state`), or from a transcript written
    elsewhere (``parallelsearch.rl.rewards.read_episode``)."""

    turns: tuple[TurnRecord, ...]
    observations: tuple[ObservationRecord, ...] = ()
    answer: str | None = None
    question: str = ""
    protocol: str = "tags"

    @classmethod
    def from_state(cls, values: Mapping[str, Any]) -> Episode:
        trajectory: Sequence[TrajectoryRecord] = values.get("trajectory") or []
        return cls(
            turns=_reviewed_turns(trajectory),
            observations=tuple(t for t in trajectory if t["type"] == "observation"),
            answer=values.get("answer"),
            question=values.get("question") or "",
            protocol=values.get("protocol") or "tags",
        )

    @property
    def searches(self) -> list[TurnRecord]:
        """The turns whose search ran (valid searches, in order; a reviewed search with what the
        reviewer let run)."""
        return [t for t in self.turns if t["action"] == "search"]

    @property
    def answered(self) -> bool:
        """Whether a turn of the policy answered (not only the gold or a cut episode's state)."""
        return any(t["action"] == "answer" for t in self.turns)

    @property
    def subqueries_per_search(self) -> list[int]:
        return [len(t["subqueries"]) for t in self.searches]

    @property
    def stages_per_search(self) -> list[int]:
        return [max(len(t.get("stages") or ()), 1) for t in self.searches]

    @property
    def decomposed(self) -> bool:
        """Some search split the question into two or more sub-queries."""
        return any(n >= 2 for n in self.subqueries_per_search)

    @property
    def valid_turns(self) -> int:
        """The turns that are valid actions in the protocol's strict format (the per-turn share of a
        warm start's format validity: an episode cut short can still have written only valid turns)."""
        return sum(t["action"] != "invalid" and not t.get("format_error") for t in self.turns)

    def format_check(self) -> tuple[bool, str]:
        """(valid, reason): every turn a valid action in the protocol's strict format, the last an answer."""
        for i, turn in enumerate(self.turns):
            if turn["action"] == "invalid":
                return False, f"the episode had an invalid action (turn {i + 1}: {turn.get('reason')})"
            if turn.get("format_error"):
                return False, f"turn {i + 1}: {turn['format_error']}"
        if not self.turns or self.turns[-1]["action"] != "answer":
            return False, "incomplete: the episode ended without an answer"
        return True, "valid"


def review_record(turn: int, kept: int, rejected: int) -> ReviewRecord:
    """A reviewer's change to turn ``turn``'s search: ``kept`` calls ran, ``rejected`` were answered."""
    return {"type": "review", "turn": turn, "kept": kept, "rejected": rejected}


def _reviewed_turns(trajectory: Sequence[TrajectoryRecord]) -> tuple[TurnRecord, ...]:
    """The turns; a reviewed search's with the queries its observation shows were searched
    (``written_subqueries``: the policy's), and ``reviewed`` as its action when none ran."""
    turns: list[TurnRecord] = []
    reviewed: TurnRecord | None = None
    for entry in trajectory:
        if entry["type"] == "turn":
            turns.append(entry)
            reviewed = None
        elif entry["type"] == "review" and turns and turns[-1]["index"] == entry["turn"]:
            written = turns[-1]
            if written["action"] == "search":
                turns[-1] = reviewed = {**written, "written_subqueries": written["subqueries"]}
                if not entry["kept"]:
                    reviewed.update(action="reviewed", subqueries=[])
                    reviewed = None
        elif entry["type"] == "observation" and reviewed is not None:
            reviewed["subqueries"] = [r["query"] for r in entry["results"]]
            reviewed = None
    return tuple(turns)
