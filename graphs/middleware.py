"""LangChain 1.x agent middleware on the episode engine: each hook runs where ``create_agent`` runs
it. ``before_agent``/``before_model``/``after_model``/``after_agent`` are graph nodes of their own
(so a hook that interrupts, as ``HumanInTheLoopMiddleware`` does, resumes without calling the
model again), ``wrap_model_call`` wraps the planner's model call and ``wrap_tool_call`` each
search call; a hook's ``jump_to`` (``model``, ``tools``, ``end``) is followed. The middleware's
state fields join the graph's state."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

NODE_HOOKS = ("before_agent", "before_model", "after_model", "after_agent")
#: state keys of LangChain's agent state that the graph already has or handles itself
_OWN_KEYS = {"messages", "jump_to", "structured_response"}


def _base() -> Any:
    try:
        from langchain.agents.middleware import AgentMiddleware
    except ImportError as e:  # pragma: no cover - langchain is in the dev and langgraph extras
        raise ImportError("middleware= needs LangChain 1.x: pip install 'langchain>=1'") from e
    return AgentMiddleware


def overrides(mw: Any, hook: str) -> tuple[bool, bool]:
    """Whether ``mw`` implements the sync and the async form of ``hook``."""
    base = _base()
    cls = type(mw)
    return getattr(cls, hook) is not getattr(base, hook), getattr(cls, f"a{hook}") is not getattr(
        base, f"a{hook}"
    )


@dataclass(frozen=True)
class Middleware:
    """The middleware of one graph, in the order given (the first is the outermost wrapper)."""

    items: tuple[Any, ...]

    @classmethod
    def of(cls, items: Sequence[Any] | None) -> Middleware | None:
        """``items`` checked: LangChain ``AgentMiddleware`` objects with distinct names, adding no tools."""
        if not items:
            return None
        base = _base()
        names: set[str] = set()
        for mw in items:
            if not isinstance(mw, base):
                raise TypeError(
                    f"middleware must be LangChain AgentMiddleware objects, got {type(mw).__name__} {mw!r:.80}"
                )
            if mw.name in names:
                raise ValueError(f"two middleware are named {mw.name!r}; each needs its own name")
            names.add(mw.name)
            if getattr(mw, "tools", None):
                raise ValueError(
                    f"middleware {mw.name!r} registers tools; this graph's one tool is search (give "
                    "searchers as tools= instead)"
                )
        return cls(tuple(items))

    def with_hook(self, hook: str) -> list[Any]:
        return [mw for mw in self.items if any(overrides(mw, hook))]

    def node_names(self, hook: str) -> list[str]:
        return [f"{mw.name}.{hook}" for mw in self.with_hook(hook)]

    def state_fields(self) -> dict[str, Any]:
        """The fields the middleware keep in the graph's state (their ``state_schema``)."""
        from typing import get_type_hints

        fields: dict[str, Any] = {}
        for mw in self.items:
            hints = get_type_hints(mw.state_schema, include_extras=True)
            fields.update({k: v for k, v in hints.items() if k not in _OWN_KEYS})
        return fields


def hook_node(mw: Any, hook: str) -> Any:
    """A graph node running ``mw``'s ``hook`` (sync, async or both, as it implements them)."""
    from langgraph._internal._runnable import RunnableCallable

    sync, asyn = overrides(mw, hook)
    return RunnableCallable(
        getattr(mw, hook) if sync else None, getattr(mw, f"a{hook}") if asyn else None, trace=False
    )


def can_jump_to(mw: Any, hook: str) -> list[str]:
    """Where ``mw``'s ``hook`` may send the run (LangChain's ``hook_config(can_jump_to=...)``)."""
    for name in (hook, f"a{hook}"):
        method = getattr(type(mw), name, None)
        if method is not None and method is not getattr(_base(), name) and hasattr(method, "__can_jump_to__"):
            return list(method.__can_jump_to__)
    return []


async def _wrapped_call(mw: Any, hook: str, request: Any, handler: Callable[[Any], Awaitable[Any]]) -> Any:
    """``mw``'s async ``hook`` around ``handler``; a sync-only hook runs in a thread of its own
    with a handler that hands the call back to this loop (``sync_bridge.run_sync_hook``)."""
    sync, asyn = overrides(mw, hook)
    if asyn or not sync:
        return await getattr(mw, f"a{hook}")(request, handler)
    from parallelsearch.graphs.sync_bridge import run_sync_hook

    return await run_sync_hook(getattr(mw, hook), request, handler)


async def wrapped(
    middleware: Sequence[Any], hook: str, request: Any, handler: Callable[[Any], Awaitable[Any]]
) -> Any:
    """``handler(request)`` inside every ``hook`` of ``middleware``, the first the outermost."""
    if not middleware:
        return await handler(request)
    first, rest = middleware[0], middleware[1:]

    async def inner(req: Any) -> Any:
        return await wrapped(rest, hook, req, handler)

    return await _wrapped_call(first, hook, request, inner)
