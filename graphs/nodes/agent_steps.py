"""The chat agent's two steps, named as ``create_agent`` names its own: ``model`` is the planner's
turn, opening the episode in the same step on a run with input and closing it when the turn
answers; ``tools`` is a whole search
round, its sub-queries searched at once (one encoder call) and joined, a search with ``#k`` stage
after stage. Fewer steps are fewer checkpoints on a growing thread (docs/performance.md)."""

from __future__ import annotations

import asyncio
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.runtime import Runtime

from parallelsearch.graphs.engine import EpisodeEngine
from parallelsearch.graphs.nodes.begin_answer import answer, begin
from parallelsearch.graphs.nodes.common import applied, combined
from parallelsearch.graphs.nodes.planner import planner
from parallelsearch.graphs.nodes.search import join, route, search
from parallelsearch.graphs.state import RouteView, SearchState
from parallelsearch.graphs.turns import after_turn
from parallelsearch.graphs.wiring import Steps

#: the channel the graph's input step sets (the model step opens an episode then, and clears it)
NEW_INPUT = "new_input"


async def model_step(
    engine: EpisodeEngine,
    steps: Steps,
    state: SearchState,
    config: RunnableConfig,
    runtime: Runtime,
) -> dict[str, Any]:
    """The planner's turn, in one update with what would be steps of their own: opening the
    episode first on a run with input (``steps.opens``), and closing it when the turn ends it (an
    answer, the final turn) and ``steps.closes``."""
    opening: dict[str, Any] = {}
    if steps.opens and state.get(NEW_INPUT):  # type: ignore[misc]  # a field of the agent's state
        opening = {**await begin(engine, state, config, runtime), NEW_INPUT: False}
        state = applied(state, opening)  # type: ignore[assignment]
    turn = await planner(engine, state, config, runtime)
    update = combined(opening, turn)
    act = turn.get("last_action", state.get("last_action")) or {}
    if not steps.closes or after_turn(act) != "answer":
        return update
    closing = await answer(engine, applied(state, turn), config, runtime)  # type: ignore[arg-type]
    return combined(update, closing)


async def tools_step(
    engine: EpisodeEngine, state: SearchState, config: RunnableConfig, runtime: Runtime
) -> dict[str, Any]:
    """The round the last turn asked for: each stage's sub-queries searched concurrently (as the
    ``Send``-ed searcher nodes run them), then joined; the next stage of a ``#k`` search follows."""
    first = route(engine, state)
    tasks = [send.arg for send in first] if isinstance(first, list) else []
    seen: dict[str, Any] = dict(state)
    update: dict[str, Any] = {}
    while tasks:
        found = await asyncio.gather(*(search(engine, task, config, runtime) for task in tasks))
        rows = {"results": [row for one in found for row in one["results"]]}
        seen, update = applied(seen, rows), combined(update, rows)
        joined = await join(engine, seen, config, runtime)  # type: ignore[arg-type]
        seen, update = applied(seen, joined), combined(update, joined)
        tasks = list(joined.get("next_stage") or [])
    return update


def agent_router(engine: EpisodeEngine) -> Any:
    """Where the chat agent goes after a turn (``search``: its tools step), reading only
    :class:`RouteView`'s channels."""

    def route_turn(state: RouteView) -> str:
        return after_turn(state.get("last_action") or {})

    return route_turn
