"""The edges of a searching graph, with its middleware's hook nodes where ``create_agent`` puts
them: ``begin -> before_agent* -> before_model* -> model step -> after_model* (last first) ->
review -> route``, the search loop back to the first ``before_model``, and ``answer ->
after_agent* -> END``. Two shapes share it (:class:`Steps`): the paper graphs' ``planner``,
``Send``-ed ``search`` nodes and ``join``, and the chat agent's ``model`` and ``tools`` (the
round searched and joined in one step, the answer closed in the model step)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from langgraph._internal._runnable import RunnableCallable
from langgraph.graph import END, START, StateGraph

from parallelsearch.graphs.middleware import NODE_HOOKS, Middleware, can_jump_to, hook_node


@dataclass(frozen=True)
class Steps:
    """A searching graph's step names. ``join``: the fan-in node after the ``Send``-ed searcher
    nodes (None: the tools step joins its own round). ``closes``: the model step closes the
    episode itself when it answers (its route's ``answer`` goes on past the answer node)."""

    model: str = "planner"
    tools: str = "search"
    join: str | None = "join"
    closes: bool = False
    #: the model step opens the episode itself on a run with input (no ``begin`` node; only
    #: where no ``before_agent``/``before_model`` hook comes between them)
    opens: bool = False


#: the paper graphs' steps (what training, evaluation and the server stream read)
PAPER_STEPS = Steps()
#: the chat agent's steps, named as ``create_agent`` names its own
AGENT_STEPS = Steps(model="model", tools="tools", join=None, closes=True)


def add_hook_nodes(b: StateGraph, mw: Middleware | None) -> None:
    for hook in NODE_HOOKS:
        for m in mw.with_hook(hook) if mw else []:
            b.add_node(f"{m.name}.{hook}", hook_node(m, hook))


def _chain(
    b: StateGraph, names: list[str], last: str, jumps: dict[str, str], mw: Middleware | None, hook: str
) -> None:
    """``names`` in a row, then ``last``; a hook that may jump gets its ``jump_to`` edge."""
    hooks = {f"{m.name}.{hook}": m for m in (mw.with_hook(hook) if mw else [])}
    for here, there in zip(names, [*names[1:], last], strict=True):
        allowed = [j for j in can_jump_to(hooks[here], hook) if j in jumps] if here in hooks else []
        if not allowed:
            b.add_edge(here, there)
            continue

        def jump(state: dict[str, Any], default: str = there) -> str:
            return jumps.get(state.get("jump_to") or "", default)

        destinations = sorted({there, *(jumps[j] for j in allowed)})
        b.add_conditional_edges(here, RunnableCallable(jump, trace=False), destinations)


def needs_review(mw: Middleware | None) -> bool:
    """Whether the graph has ``after_model`` hooks, hence its ``review`` node after them."""
    return bool(mw and mw.node_names("after_model"))


def hooks_before_model(mw: Middleware | None) -> bool:
    """Whether ``before_agent`` or ``before_model`` hooks come between the input and the model."""
    return bool(mw and (mw.node_names("before_agent") or mw.node_names("before_model")))


def wire_search_loop(
    b: StateGraph,
    mw: Middleware | None,
    route: Callable[..., Any],
    after_join: Callable[..., Any],
    steps: Steps = PAPER_STEPS,
) -> bool:
    """The searching graphs' edges, middleware hooks included (none: begin -> model step ->
    route). Returns whether the graph needs its ``review`` node (after ``after_model`` hooks)."""
    names = {hook: mw.node_names(hook) if mw else [] for hook in NODE_HOOKS}
    before_model, after_model = names["before_model"], names["after_model"][::-1]
    after_agent = names["after_agent"][::-1]
    loop = before_model[0] if before_model else steps.model
    review = bool(after_model)
    jumps = {"model": loop, "end": "answer", **({"tools": "review"} if review else {})}
    if steps.opens:
        b.add_edge(START, steps.model)
    else:
        b.add_edge(START, "begin")
        _chain(b, ["begin", *names["before_agent"]], loop, jumps, mw, "before_agent")
    if before_model:
        _chain(b, before_model, steps.model, jumps, mw, "before_model")
    if review:
        b.add_edge(steps.model, after_model[0])
        _chain(b, after_model, "review", jumps, mw, "after_model")
    decide = "review" if review else steps.model
    closed = after_agent[0] if after_agent else END  # where an episode the model step closed goes
    done = closed if steps.closes and not review else "answer"
    b.add_conditional_edges(decide, route, {"search": steps.tools, "planner": loop, "answer": done})
    if steps.join is None:
        b.add_edge(steps.tools, loop)
    else:
        b.add_edge(steps.tools, steps.join)
        b.add_conditional_edges(steps.join, after_join, {"search": steps.tools, "planner": loop})
    b.add_edge("answer", after_agent[0] if after_agent else END)
    if after_agent:
        _chain(b, after_agent, END, {}, mw, "after_agent")
    return review
