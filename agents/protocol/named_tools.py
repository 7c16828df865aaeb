"""The tools protocol over named searchers: each searcher is a tool of its own (its name, its
description), as ``create_agent`` shows a model its tools, so the model chooses where to search.
A call ``wiki(query)`` is the sub-query ``wiki: query``, which the graph's routing searcher sends
to ``wiki``; the calls of one message are still one parallel round."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from parallelsearch.agents.protocol.templates import SEARCH_TOOL
from parallelsearch.agents.protocol.tools import Tools


def tool_spec(name: str, description: str) -> dict[str, Any]:
    """A named searcher as a tool in the OpenAI function format (one ``query`` argument)."""
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description or f"Search {name} for one self-contained query.",
            "parameters": SEARCH_TOOL["function"]["parameters"],
        },
    }


def split_call(query: str, names: Sequence[str]) -> tuple[str | None, str]:
    """``(name, query)`` of a named call's sub-query ``name: query`` (``None``: not named)."""
    head, sep, rest = query.partition(":")
    if sep and head in names:
        return head, rest.strip()
    return None, query


class NamedTools(Tools):
    """:class:`Tools` with one tool per named searcher instead of the one ``search`` tool."""

    def __init__(self, named: Sequence[tuple[str, str]]):
        if not named:
            raise ValueError("NamedTools needs at least one (name, description)")
        self.names = tuple(n for n, _ in named)
        self.tools = tuple(tool_spec(n, d) for n, d in named)  # type: ignore[misc]

    def instructions(self, template: str | None = None) -> str:
        """The tools template, told that there are several search tools to choose from."""
        text = super().instructions(template)
        listed = ", ".join(self.names)
        return text.replace(
            "call the search tool;", f"call one of the search tools ({listed}), chosen by their descriptions;"
        ).replace("call search once per sub-question", "call a search tool once per sub-question")

    def prompt(self, question: str, template: str | None = None, stores: Sequence[str] = ()) -> str:
        # the tools name the searchers: no "store: query" hint
        return super().prompt(question, template, ())
