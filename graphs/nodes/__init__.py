"""The graph's nodes, as functions of an :class:`~parallelsearch.graphs.engine.EpisodeEngine`:
``begin`` and ``answer`` open and close an episode (``begin_answer.py``), ``planner`` makes one policy
turn (``planner.py``), ``route``/``search``/``join``/``after_join`` fan a search out and in
(``search.py``), a search with ``#k`` runs its later stages (``stages.py``)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from parallelsearch.graphs.engine import EpisodeEngine
from parallelsearch.graphs.nodes.begin_answer import answer, begin
from parallelsearch.graphs.nodes.planner import planner, review
from parallelsearch.graphs.nodes.search import after_join, join, retrieve_once, route, router, search

__all__ = [
    "after_join",
    "answer",
    "begin",
    "bound_nodes",
    "join",
    "planner",
    "retrieve_once",
    "route",
    "router",
    "search",
]

_NODES: dict[str, Callable[..., Any]] = {
    "begin": begin,
    "retrieve": retrieve_once,
    "planner": planner,
    "review": review,
    "search": search,
    "join": join,
    "answer": answer,
}


def bound_nodes(engine: EpisodeEngine, *names: str) -> dict[str, Callable[..., Any]]:
    """The named node functions bound to ``engine`` (LangGraph reads each one's remaining
    parameters to pass ``config`` and ``runtime``)."""
    return {name: functools.partial(_NODES[name], engine) for name in names}
