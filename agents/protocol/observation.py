"""One sub-query's result as every protocol shows it: ``Doc i(Title: t) text`` lines, the line of a
failed search, the line of a resolved ``#k``, and the word cap."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

from parallelsearch.stores.errors import check_choice
from parallelsearch.stores.passages import Passage
from parallelsearch.stores.text import scrub_text

#: how ``Doc i(Title: t)`` shows a title: ``official`` = the corpus entry's first line verbatim, quotes
#: kept (``Title: "Aaron"``), as released checkpoints saw it; ``stripped`` = the bare title
TitleStyle = Literal["official", "stripped"]
TITLE_STYLES: tuple[str, ...] = get_args(TitleStyle)


@dataclass(frozen=True)
class SubqueryResult:
    """What a search of one sub-query found: ``query`` as searched, its passages or the error, and
    for a dependent sub-query the text its ``#k`` was resolved to (shown before its passages)."""

    query: str
    passages: Sequence[Passage] = ()
    error: str | None = None
    searched_as: str | None = None
    #: a tool's own text (a tool, a function returning text): what the model reads, verbatim
    content: str | None = None


@dataclass(frozen=True)
class ObservationStyle:
    """How results are shown, every protocol alike: the title style and an optional
    whitespace-token cap. The formatters below take it whole, so a new observation option is a
    field here, read in :meth:`of` from its graph knob and used where results are formatted."""

    titles: TitleStyle = "stripped"
    max_words: int | None = None

    def __post_init__(self) -> None:
        check_choice(self.titles, TITLE_STYLES, "title style")

    @classmethod
    def of(cls, config: Any) -> ObservationStyle:
        """The style a graph configuration (``GraphConfig``'s observation knobs) sets."""
        return cls(titles=config.observation_titles or "stripped", max_words=config.max_observation_words)


#: the style of a graph with no observation knob set
DEFAULT_STYLE = ObservationStyle()


@dataclass(frozen=True)
class Observation:
    """What the environment adds after a turn: its text form (appended to the transcript a text
    policy reads) and its messages (appended to the conversation a chat policy reads)."""

    text: str = ""
    messages: tuple[object, ...] = field(default=())


def format_passages(passages: Sequence[Passage], style: ObservationStyle = DEFAULT_STYLE) -> str:
    """One sub-query's results: ``Doc i(Title: t) text`` lines, numbering from 1."""
    official = style.titles == "official"
    return "".join(
        f"Doc {i}(Title: {p.first_line if official else p.title}) {p.text}\n"
        for i, p in enumerate(passages, 1)
    )


def failure_line(query: str, error: str) -> str:
    """What a failed search shows instead of passages."""
    return f"Search failed for '{query}': {error}"


def searched_as_line(text: str) -> str:
    """The line that shows what a dependent sub-query was searched with, once its ``#k`` was
    resolved: the policy reads which name the environment put in, in every protocol."""
    return f"Searched as: {' '.join(text.split())}\n"


def cap_words(text: str, style: ObservationStyle) -> str:
    """``text`` cut to the style's ``max_words`` space-separated tokens (then `` ...``); None = no cap."""
    max_words = style.max_words
    if max_words is None:
        return text
    words = text.split(" ")
    return text if len(words) <= max_words else " ".join(words[:max_words]) + " ..."


def subquery_texts(results: Sequence[SubqueryResult], style: ObservationStyle) -> list[str]:
    """Each sub-query's text on its own (one tool message each): its passages (or the failure), a
    resolved ``#k`` first, each capped on its own."""
    texts: list[str] = []
    for r in results:
        if r.error:
            body = failure_line(r.query, r.error)
        elif r.content is not None:
            body = scrub_text(r.content)[0]
        else:
            body = scrub_text(format_passages(r.passages, style).strip())[0] or "No passages found."
        if r.searched_as is not None:
            body = searched_as_line(r.searched_as) + body
        texts.append(cap_words(body, style))
    return texts
