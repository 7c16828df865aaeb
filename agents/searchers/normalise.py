"""The one normaliser of what foreign searchers return: converted at the edge, once, a bad item is
one error naming the searcher and the item, not an ``AttributeError`` deep inside the graph."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any

from parallelsearch.stores.errors import ParallelSearchError
from parallelsearch.stores.passages import Passage, passage_id, split_contents

#: dict keys read for the passage text, first present wins (``contents`` = Search-R1 ``"Title"\ntext``)
TEXT_KEYS = ("text", "page_content", "content", "snippet", "contents")
#: what a searcher's result may hold, as the error messages name it
ACCEPTED_ITEMS = (
    "str (its first line is the title, as in the Search-R1 corpus), "
    f"dict with a text key ({', '.join(TEXT_KEYS)}) and optional title, id, score, "
    "langchain_core Document (title from metadata['title']), or Passage"
)


class SearcherOutputError(ParallelSearchError, ValueError):
    """A searcher returned something that is not a list of passages (a mistake in the searcher,
    so the search guard reports it at once instead of retrying)."""


def _passage(text: str, title: Any, pid: Any, score: Any, store: str, heading: str | None = None) -> Passage:
    title, text = str(title).strip(), text.strip()
    return Passage(
        id=str(pid) if pid not in (None, "") else passage_id(title, text),
        title=title,
        text=text,
        score=float(score) if isinstance(score, int | float) and not isinstance(score, bool) else None,
        store=store,
        heading=heading,
    )


def _from_contents(contents: str, pid: Any, score: Any, store: str) -> Passage:
    """A Search-R1 corpus entry: its first line is the title (surrounding quotes stripped, the line
    kept verbatim for the official rendering), the rest the text; one line is a title alone, as
    the official retriever renders it."""
    title, text = split_contents(contents)
    return _passage(text, title, pid, score, store, heading=contents.partition("\n")[0])


def _from_mapping(item: Mapping[str, Any], store: str) -> Passage | None:
    meta = item.get("metadata") if isinstance(item.get("metadata"), Mapping) else {}
    for key in TEXT_KEYS:
        text = item.get(key)
        if isinstance(text, str):
            title = item.get("title", meta.get("title"))
            pid, score = item.get("id", meta.get("id")), item.get("score")
            if key == "contents" and title is None:  # Search-R1: the first line is the title
                return _from_contents(text, pid, score, store)
            return _passage(text, "" if title is None else title, pid, score, store)
    return None


def to_passage(item: Any, store: str) -> Passage | None:
    """One result item as a passage (``store`` = the searcher's name), or None when it is not one
    of :data:`ACCEPTED_ITEMS`."""
    if isinstance(item, Passage):
        return item if item.store is not None else dataclasses.replace(item, store=store)
    if isinstance(item, str):
        return _from_contents(item, None, None, store)
    if isinstance(item, Mapping):
        return _from_mapping(item, store)
    text = getattr(item, "page_content", None)  # a langchain_core Document, without importing it
    if isinstance(text, str):
        meta = getattr(item, "metadata", None) or {}
        pid = meta.get("id") or getattr(item, "id", None)
        title = meta.get("title")
        return _passage(text, "" if title is None else title, pid, meta.get("score"), store)
    return None


def to_passages(result: Any, searcher: str, k: int | None = None) -> list[Passage]:
    """A searcher's whole result as at most ``k`` passages; :class:`SearcherOutputError` names
    the searcher and the first item that is not a passage, string, dict or Document."""
    if isinstance(result, str | bytes | Mapping) or not isinstance(result, Iterable):
        raise SearcherOutputError(
            f"searcher {searcher!r} returned {type(result).__name__} {shown(result)}; "
            f"it must return a list of: {ACCEPTED_ITEMS}"
        )
    out = []
    for i, item in enumerate(result):
        if k is not None and i >= k:
            break
        p = to_passage(item, searcher)
        if p is None:
            raise SearcherOutputError(
                f"searcher {searcher!r} returned item {i} {shown(item)} ({type(item).__name__}); "
                f"accepted: {ACCEPTED_ITEMS}"
            )
        out.append(p)
    return out


class ToolResult(list):  # type: ignore[type-arg]  # a list of passages, as every searcher returns
    """What a tool or a text-returning function gave, as ``create_agent`` keeps it: its passages
    (for the record), the tool's own ``content`` (what the model reads, verbatim) and its
    ``artifact`` (kept on the tool message, as a ``content_and_artifact`` tool's)."""

    def __init__(self, passages: Iterable[Passage], content: str, artifact: Any = None):
        super().__init__(passages)
        self.content = content
        self.artifact = artifact


def text_result(text: str, searcher: str, artifact: Any = None) -> ToolResult:
    """A tool's text: one passage for the record (a Search-R1 entry: its first line the title) and
    the text itself as what the model reads; ``artifact`` (a list of passage-like items) gives the
    record its passages instead."""
    passages: list[Passage] = []
    if (
        artifact is not None
        and not isinstance(artifact, str | bytes | Mapping)
        and isinstance(artifact, Iterable)
    ):
        try:
            passages = to_passages(artifact, searcher)
        except SearcherOutputError:
            passages = []
    if not passages and text.strip():
        passages = [_from_contents(text, None, None, searcher)]
    return ToolResult(passages, text, artifact)


def shown(value: Any, width: int = 120) -> str:
    """``repr(value)``, cut to ``width`` characters, for an error message."""
    text = repr(value)
    return text if len(text) <= width else text[: width - 3] + "..."
