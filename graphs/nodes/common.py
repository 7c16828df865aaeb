"""Small helpers more than one node needs."""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from typing import Any

from parallelsearch.agents.protocol import TurnResult
from parallelsearch.stores.passages import Passage


def ms_since(t0: float) -> float:
    return round((time.perf_counter() - t0) * 1000, 3)


def usage_update(state: Mapping[str, Any], res: TurnResult) -> dict[str, Any]:
    """Labels and token counts after turn ``res``, written only when changed (a write costs time)."""
    update: dict[str, Any] = {}
    labels = state.get("labels") or []
    if not set(res.labels) <= set(labels):
        update["labels"] = sorted(set(labels) | set(res.labels))
    if res.prompt_tokens is not None:
        update["tokens_in"] = (state.get("tokens_in") or 0) + res.prompt_tokens
    if res.completion_tokens is not None:
        update["tokens_out"] = (state.get("tokens_out") or 0) + res.completion_tokens
    return update


def only_changed(state: Mapping[str, Any], update: dict[str, Any]) -> dict[str, Any]:
    """``update`` without the plain channels it would set to the value they hold: each write is
    a new channel version the checkpointer serialises again, on every step of a long thread."""
    from langgraph.types import Overwrite

    from parallelsearch.graphs.state import REDUCED_KEYS

    return {
        k: v
        for k, v in update.items()
        if k in REDUCED_KEYS or k not in state or isinstance(v, Overwrite) or state[k] != v  # type: ignore[index]
    }


def passages_of(row: Mapping[str, Any]) -> list[Passage]:
    """A searcher node's result row's passages as objects again (the row's dicts carry a ``source``)."""
    return [
        Passage(p["id"], p["title"], p["text"], p.get("score"), p.get("store"), heading=p.get("heading"))
        for p in row["passages"]
    ]


def name_tool_messages(messages: Iterable[Any], calls: Iterable[Mapping[str, Any]]) -> None:
    """Give each new tool message of ``messages`` the name of the call it answers, as
    ``create_agent``'s tool node names them (named in place: they are this node's own objects)."""
    names = {c.get("id"): c.get("name") for c in calls}
    for m in messages:
        if getattr(m, "type", None) == "tool" and not m.name:
            m.name = names.get(m.tool_call_id)


def applied(state: Mapping[str, Any], update: Mapping[str, Any]) -> dict[str, Any]:
    """``state`` as LangGraph leaves it after ``update`` (reducers applied): what a later part of
    the same step reads, when one step does the work of two."""
    from langgraph.types import Overwrite

    from parallelsearch.graphs.state import REDUCERS

    out = dict(state)
    for k, v in update.items():
        if isinstance(v, Overwrite):
            out[k] = v.value
        elif k in REDUCERS:
            out[k] = REDUCERS[k](out.get(k) or ([] if k != "node_ms" else {}), v)
        else:
            out[k] = v
    return out


def combined(first: Mapping[str, Any], second: Mapping[str, Any]) -> dict[str, Any]:
    """One update that does what ``first`` then ``second`` do: a reducer channel's writes in a
    row (a message written again under its id replaces the first), any other the later value."""
    from langgraph.types import Overwrite

    from parallelsearch.graphs.state import REDUCED_KEYS, sum_ms

    out = dict(first)
    for k, v in second.items():
        prev = out.get(k)
        if k not in REDUCED_KEYS or prev is None or isinstance(v, Overwrite):
            out[k] = v
        elif isinstance(prev, Overwrite):
            out[k] = Overwrite(applied({k: prev.value}, {k: v})[k])
        else:
            out[k] = sum_ms(prev, v) if k == "node_ms" else [*prev, *v]
    return out
