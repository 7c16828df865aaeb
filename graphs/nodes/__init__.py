"""The graph's nodes, as functions of an :class:`~parallelsearch.graphs.engine.EpisodeEngine`:
``begin`` and ``answer`` open and close an episode (``begin_answer.py``), ``planner`` makes one policy
turn (``planner.py``), ``route``/``search``/``join``/``after_join`` fan a search out and in
(``search.py``), a search with ``#k`` runs its later stages (``stages.py``); the chat agent's
``model`` and ``tools`` steps do the same work in fewer steps (``agent_steps.py``)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from parallelsearch.graphs.engine import EpisodeEngine
from parallelsearch.graphs.nodes.agent_steps import agent_router, model_step, tools_step
from parallelsearch.graphs.nodes.begin_answer import answer, begin
from parallelsearch.graphs.nodes.planner import planner, review
from parallelsearch.graphs.nodes.search import after_join, join, retrieve_once, route, router, search
from parallelsearch.graphs.wiring import Steps

__all__ = [
    "after_join",
    "agent_nodes",
    "agent_router",
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


def agent_nodes(engine: EpisodeEngine, steps: Steps) -> dict[str, Callable[..., Any]]:
    """The chat agent's nodes, bound to ``engine``: ``model`` (opening and closing the episode
    as ``steps`` says), ``tools``, ``answer`` (reached by a hook's jump, after a review, or with
    a separate answer policy) and ``begin`` unless the model step opens the episode."""
    nodes = {} if steps.opens else {"begin": functools.partial(begin, engine)}
    return {
        **nodes,
        "model": functools.partial(model_step, engine, steps),
        "tools": functools.partial(tools_step, engine),
        "answer": functools.partial(answer, engine),
    }
