"""The passage record shared by readers, stores, searchers and the retrieval server. Ids are content
hashes of title + text, so a paragraph read from two benchmark files is one passage in a store.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from math import inf


def passage_id(title: str, text: str) -> str:
    """Stable id: first 16 hex digits of sha1(title + NUL + text)."""
    digest = hashlib.sha1(f"{title.strip()}\x00{text.strip()}".encode()).hexdigest()
    return digest[:16]


def to_contents(title: str, text: str) -> str:
    """Search-R1 / FlashRAG `contents` field: quoted title on the first line, then the text."""
    return f'"{title}"\n{text}'


def split_contents(contents: str) -> tuple[str, str]:
    """Inverse of :func:`to_contents`; surrounding quotes of the title line are stripped."""
    title, _, text = contents.partition("\n")
    title = title.strip()
    if len(title) >= 2 and title[0] == '"' and title[-1] == '"':
        title = title[1:-1]
    return title, text.strip()


@dataclass(frozen=True)
class Passage:
    """One retrievable paragraph. `score` and `store` are set by searches, empty when read from a file."""

    id: str
    title: str
    text: str
    score: float | None = None
    store: str | None = None
    source: str | None = field(default=None, compare=False)
    #: the corpus entry's first line verbatim, when the passage came as Search-R1 ``contents``
    #: from a /retrieve server (``"Aaron"`` with its quotes); None = derive it from the title
    heading: str | None = field(default=None, compare=False)

    @classmethod
    def make(cls, title: str, text: str, source: str | None = None) -> Passage:
        title, text = title.strip(), text.strip()
        return cls(id=passage_id(title, text), title=title, text=text, source=source)

    @property
    def contents(self) -> str:
        return to_contents(self.title, self.text)

    @property
    def first_line(self) -> str:
        """The title line as the official code renders it: the corpus entry's first line verbatim
        (what our ``/retrieve`` server serves as ``contents`` is ``"Title"`` + newline + text)."""
        return self.heading if self.heading is not None else self.contents.partition("\n")[0]

    def to_dict(self) -> dict:
        # not dataclasses.asdict: it deep-copies every field of every search result (docs/performance.md)
        return dict(vars(self))


def best_first(passages: Iterable[Passage], k: int) -> list[Passage]:
    """The ``k`` best ``passages`` by score, equal scores by id: duplicate paragraphs under other
    titles score exactly alike, and an index returns them in an order its build decided."""
    return sorted(passages, key=lambda p: (-(p.score if p.score is not None else -inf), p.id))[:k]
