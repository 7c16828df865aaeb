"""What one policy turn asked for, whatever protocol it was written in: the :class:`Action` every
parser returns, and the text helpers the parsers share."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Literal

from parallelsearch.agents.protocol.turn import STOP_STRINGS

SUBQUERY_SEPARATOR = "##"


@dataclass(frozen=True)
class ToolCallOutcome:
    """One tool call of a tool-calling turn: the sub-query it searches (duplicates share one
    index) or why it is invalid. Every call gets exactly one tool message back, by ``id``."""

    id: str
    index: int | None = None
    error: str | None = None


@dataclass(frozen=True)
class Action:
    """What one policy turn asked for (``calls``: the tool calls of a tool-calling turn)."""

    kind: Literal["search", "answer", "invalid"]
    subqueries: tuple[str, ...] = ()
    answer: str | None = None
    think: str | None = None
    reason: str | None = None
    raw_query: str | None = None
    dropped: tuple[str, ...] = field(default=())
    calls: tuple[ToolCallOutcome, ...] = field(default=())


def truncate_at_stop(text: str, stops: Sequence[str] = STOP_STRINGS) -> str:
    """Cut ``text`` after the first stop string (kept), as vLLM does with include_stop_str_in_output."""
    ends = [text.find(s) + len(s) for s in stops if s in text]
    return text[: min(ends)] if ends else text


def _pieces(query: str) -> Iterator[str]:
    """The ``##``-separated pieces of ``query``, found one at a time (no list of all of them)."""
    start = 0
    sep = len(SUBQUERY_SEPARATOR)
    while True:
        end = query.find(SUBQUERY_SEPARATOR, start)
        if end == -1:
            yield query[start:]
            return
        yield query[start:end]
        start = end + sep


def split_subqueries(query: str, limit: int | None = None) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """``a ## b ## a ##`` -> (("a", "b"), ("a",)): stripped, empties dropped, duplicates kept once.
    Linear; with ``limit`` reading stops at the first distinct piece past it (enough to refuse)."""
    kept: dict[str, None] = {}
    dropped: list[str] = []
    for raw in _pieces(query):
        piece = " ".join(raw.split())
        if piece in kept:
            dropped.append(piece)
        elif piece:
            kept[piece] = None
            if limit is not None and len(kept) > limit:
                break
    return tuple(kept), tuple(dropped)


def content_text(content: object) -> str:
    """A message's text: a string, or the text parts of a content-block list."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            c if isinstance(c, str) else str(c.get("text", "")) if isinstance(c, dict) else ""
            for c in content
        )
    return ""
