"""The front door: one call from a chat model (or any policy) and searchers to a compiled
ParallelSearch graph. It takes what LangChain 1.x ``create_agent`` takes where it applies (the
model, the searchers as ``tools``, ``system_prompt``, ``middleware``, ``checkpointer``, ``store``,
``context_schema``, ``name``, ``debug``, ``interrupt_before``/``interrupt_after``) plus this
project's knobs (``graph``, ``top_k``, ``max_turns``, ...).
"""

from __future__ import annotations

import difflib
import inspect
import warnings
from collections.abc import Sequence
from typing import Any, Literal, get_args

from langchain_core.messages import SystemMessage
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.store.base import BaseStore
from typing_extensions import Unpack

from parallelsearch.agents.protocol import SEARCH_TOOL_NAME, content_text
from parallelsearch.agents.searchers.backends import Searchers
from parallelsearch.graphs.builders import GraphBuild, Planner, SearchGraph, build_graph, check_graph_kind
from parallelsearch.graphs.config import GraphConfig, GraphContext, GraphOptions
from parallelsearch.stores.config import RetrievalConfig
from parallelsearch.stores.errors import check_choice

#: the graph kinds the front door builds (the one-turn baselines are eval's)
AgentGraph = Literal["parallel", "sequential", "dag"]
#: the agent's nodes a run may be interrupted at (``model`` and ``tools`` as create_agent names them)
_NODES = ("begin", "model", "tools", "answer")
#: the paper graphs' names of the same steps, also taken for interrupt_before/_after
_PAPER_NAMES = {"planner": "model", "search": "tools"}
#: create_agent keywords this agent does not take, and why
_NOT_TAKEN = {
    "state_schema": "the graph's state is its own; middleware add their state with their state_schema",
    "prompt": "give instructions as system_prompt=, or a prompt template as prompt_template=",
}


def _is_store_name(given: Any) -> bool:
    return isinstance(given, str) and not given.startswith(("http://", "https://"))


def _is_named_tool(given: Any) -> bool:
    """A LangChain tool, or a plain function with a name of its own (not a lambda)."""
    from langchain_core.tools import BaseTool

    if isinstance(given, BaseTool):
        return True
    return inspect.isfunction(given) and given.__name__ != "<lambda>"


def named_searchers(given: Any) -> list[tuple[str, str, Any]] | None:
    """``(name, description, searcher)`` of searchers given as named tools (a LangChain tool, or a
    list of tools and functions), each shown to the model as a tool of its own; ``None`` for
    anything else (a lone function, a store, a retriever: the one ``search`` tool)."""
    from langchain_core.tools import BaseTool

    if isinstance(given, BaseTool):
        items = [given]
    elif isinstance(given, list | tuple) and given and all(_is_named_tool(s) for s in given):
        items = list(given)
    else:
        return None
    out: list[tuple[str, str, Any]] = []
    for s in items:
        name = s.name if isinstance(s, BaseTool) else s.__name__
        about = s.description if isinstance(s, BaseTool) else (inspect.getdoc(s) or "").split("\n\n")[0]
        if name in {n for n, _, _ in out}:
            raise ValueError(f"two searchers are named {name!r}; pass a {{name: searcher}} mapping instead")
        out.append((name, " ".join(about.split()), s))
    return out


def _searcher(searchers: Searchers, retrieval: RetrievalConfig | None) -> Searchers:
    """Store names -> the factory's searcher (several: routed by ``name: query``); a list of
    searchers -> a ``{name: searcher}`` mapping; anything else as given (the builder normalises it)."""
    names = [searchers] if _is_store_name(searchers) else None
    if isinstance(searchers, Sequence) and not isinstance(searchers, str) and searchers:
        if all(_is_store_name(s) for s in searchers):
            names = list(searchers)
        else:
            routed: dict[str, Any] = {}
            for i, s in enumerate(searchers):
                key = getattr(s, "name", None) or (s if isinstance(s, str) else f"searcher{i}")
                if key in routed:
                    raise ValueError(
                        f"two searchers are named {key!r}; pass a {{name: searcher}} mapping instead"
                    )
                routed[str(key)] = s
            return routed
    if names is not None:
        from parallelsearch.graphs.factory import make_searcher

        base = retrieval or RetrievalConfig()
        return make_searcher(
            RetrievalConfig.model_validate({**base.model_dump(exclude_unset=True), "stores": names})
        )
    return searchers


#: names other search APIs give a knob of this graph (a retriever's ``k`` is the graph's ``top_k``)
_ALIASES = {
    "k": "top_k",
    "n": "top_k",
    "limit": "top_k",
    "num_results": "top_k",
    "max_results": "top_k",
    "search_kwargs": "top_k",
    "max_iterations": "max_turns",
    "max_steps": "max_turns",
}


def closest(key: str, names: Sequence[str]) -> str | None:
    """The name ``key`` most likely meant: its alias (``k`` -> ``top_k``), one it is a word of,
    else the closest spelling."""
    if key in _ALIASES:
        return _ALIASES[key]
    words = [n for n in names if key in n.split("_")]
    if words:
        return words[0]
    close = difflib.get_close_matches(key, names, n=1, cutoff=0.6)
    return close[0] if close else None


def check_options(options: dict[str, Any]) -> None:
    """Every keyword is a knob (a :class:`GraphConfig` field); else a TypeError naming it, why
    it is not taken, or the closest knob."""
    known = set(GraphConfig.model_fields)
    for key in options:
        if key in known:
            continue
        if key in _NOT_TAKEN:
            raise TypeError(f"create_parallel_search_agent() does not take {key}=: {_NOT_TAKEN[key]}")
        close = closest(key, [*sorted(known), "tools", "system_prompt", "middleware"])
        hint = f" (did you mean {close!r}?)" if close else ""
        raise TypeError(
            f"create_parallel_search_agent() got an unexpected keyword {key!r}{hint}; its knobs are "
            f"GraphConfig's: {', '.join(sorted(known))}"
        )


def _nodes(
    given: Sequence[str] | None, middleware: Sequence[Any], *, after: bool = False
) -> tuple[str, ...] | None:
    """``interrupt_before`` (or, ``after``, ``interrupt_after``) as this graph's node names: ``model``
    and ``tools`` as ``create_agent`` names them (``planner`` and ``search``, the paper graphs' names,
    mean them too; after ``join`` is after ``tools``), ``begin``, ``answer`` and the middleware's
    hook nodes."""
    if not given:
        return None
    hooks = {
        f"{m.name}.{h}"
        for m in middleware
        for h in ("before_agent", "before_model", "after_model", "after_agent")
    }
    out = []
    for node in given:
        node = _PAPER_NAMES.get(node, "tools" if after and node == "join" else node)
        if node == "join":
            raise ValueError(
                "the agent searches a round and joins its results in one step, 'tools': interrupt after "
                "it (interrupt_after=['tools']) instead of before 'join'"
            )
        if node not in _NODES and node not in hooks:  # refused with the choices
            check_choice(node, (*_NODES, *sorted(hooks)), "node to interrupt at")
        out.append(node)
    return tuple(out)


def _context(schema: type | None) -> type | None:
    """A caller's context schema (a TypedDict or a dataclass, as ``create_agent`` takes it) with
    the per-request knobs' fields beside its own (a dataclass's as fields defaulting to None)."""
    if schema is None:
        return None
    import dataclasses
    from typing import get_type_hints

    from typing_extensions import TypedDict, is_typeddict

    knobs = get_type_hints(GraphContext, include_extras=True)
    if isinstance(schema, type) and dataclasses.is_dataclass(schema):
        own = {f.name for f in dataclasses.fields(schema)}
        added = [(k, hint, dataclasses.field(default=None)) for k, hint in knobs.items() if k not in own]
        frozen = schema.__dataclass_params__.frozen  # type: ignore[attr-defined]  # every dataclass has it
        merged = dataclasses.make_dataclass(schema.__name__, added, bases=(schema,), frozen=frozen)
        merged.__module__ = schema.__module__  # where a schema reader (langgraph dev) finds it
        return merged
    if not is_typeddict(schema):
        raise TypeError(
            f"context_schema must be a TypedDict or a dataclass (its keys join the per-request knobs'), got {schema!r}"
        )
    fields = {**knobs, **get_type_hints(schema, include_extras=True)}
    return TypedDict(schema.__name__, fields, total=False)  # type: ignore[operator]  # a TypedDict built at run time: checkers want literal fields


def create_parallel_search_agent(
    model: Planner,
    tools: Searchers | None = None,
    *,
    searchers: Searchers | None = None,
    system_prompt: str | SystemMessage | None = None,
    middleware: Sequence[Any] = (),  # LangChain's AgentMiddleware (langchain is an optional extra)
    checkpointer: BaseCheckpointSaver[Any] | None = None,
    store: BaseStore | None = None,
    context_schema: type | None = None,
    response_format: Any = None,
    name: str | None = None,
    debug: bool = False,
    interrupt_before: Sequence[str] | None = None,
    interrupt_after: Sequence[str] | None = None,
    graph: AgentGraph = "parallel",
    protocol: str = "auto",
    answer_model: Planner | None = None,
    retrieval: RetrievalConfig | None = None,
    config: GraphConfig | None = None,
    **options: Unpack[GraphOptions],
) -> SearchGraph:
    """A compiled ParallelSearch agent: the model decomposes, the searchers run in parallel.

    Args:
        model: a LangChain chat model, an ``init_chat_model`` string (``"openai:gpt-4o-mini"``), a policy
            spec of this project (``"oracle"``, ``"openai:MODEL@URL"`` = a completions endpoint serving a
            trained checkpoint, ``"vllm:PATH"``, ...) or a policy.
        tools (or ``searchers=``): a store name or list of them (opened with ``retrieval``, routed by
            ``name: query`` when several), a ``/retrieve`` URL, a LangChain retriever or vector store, a
            tool, a function, a list of them (routed by their ``name``) or a mapping. Named tools and
            functions are tools of their own to the model; anything else one ``search``.
        system_prompt: instructions (text or a SystemMessage) before the protocol's own.
        middleware: LangChain ``AgentMiddleware`` objects, run where ``create_agent`` runs them.
        checkpointer, store, debug, interrupt_before, interrupt_after, name, response_format: as
            ``create_agent`` takes them (its nodes are ``model`` and ``tools``, as ``create_agent``'s are;
            the parsed answer is ``structured_response``).
        context_schema: a TypedDict or a dataclass of your context keys (the knobs' are added).
        graph: ``parallel`` (ParallelSearch), ``sequential`` (Search-R1) or ``dag`` (``#k`` plans).
        protocol: ``tools`` (the model calls a ``search`` tool; several calls per message are one parallel
            round), ``tags`` (``<search> a ## b </search>`` text) or ``auto``.
        answer_model: a separate model for the answer turn (text protocols).
        config / options: :class:`GraphConfig` and/or its fields as keywords (``top_k``,
            ``max_turns``, ``max_history_messages``, ...); keywords win. Example: docs/chat-agent.md, "A chat agent".
    """
    check_graph_kind(graph, get_args(AgentGraph))  # the protocol name is GraphConfig's to check
    check_options(options)
    searcher, named = _searchers_of(_given_searchers(tools, searchers), retrieval, middleware)
    if system_prompt is not None:
        options = {**options, "system_prompt": content_text(getattr(system_prompt, "content", system_prompt))}
    build = _graph_build(middleware, named, name=name, context_schema=context_schema, store=store, debug=debug,
        interrupt_before=interrupt_before, interrupt_after=interrupt_after, response_format=response_format)  # fmt: skip
    return build_graph(graph, model, searcher, answer_policy=answer_model, checkpointer=checkpointer,
        config=config, build=build, protocol=protocol, **options)  # fmt: skip


def _graph_build(
    middleware: Sequence[Any],
    named: Any,
    *,
    name: str | None,
    context_schema: type | None,
    store: BaseStore | None,
    debug: bool,
    interrupt_before: Sequence[str] | None,
    interrupt_after: Sequence[str] | None,
    response_format: Any,
) -> GraphBuild:
    """What ``create_agent``'s own arguments ask of the compiled graph: the middleware, the named
    tools, the context schema with the knobs' keys, and interrupts by ``create_agent``'s node names."""
    return GraphBuild(
        middleware=tuple(middleware), name=name, context_schema=_context(context_schema), store=store,
        debug=debug, interrupt_before=_nodes(interrupt_before, middleware),
        interrupt_after=_nodes(interrupt_after, middleware, after=True),
        named_tools=tuple((n, about) for n, about, _ in named or ()), response_format=response_format,
        agent_steps=True,
    )  # fmt: skip


def warn_unreviewed(middleware: Sequence[Any], tool_names: Sequence[str]) -> None:
    """One warning when a middleware's ``interrupt_on`` (``HumanInTheLoopMiddleware``'s) names no
    tool of this agent: its searches would run unreviewed without a word (a lone function is the
    one ``search`` tool, not a tool under its own name)."""
    asked = [n for mw in middleware for n in (getattr(mw, "interrupt_on", None) or {}) if isinstance(n, str)]
    missing = [n for n in dict.fromkeys(asked) if n not in tool_names]
    if missing:
        warnings.warn(
            f"interrupt_on names no tool of this agent: {', '.join(map(repr, missing))}; its tools are "
            f"{', '.join(map(repr, tool_names))} (a lone searcher is the one 'search' tool; give a list of "
            "named functions or tools to have each one a tool of its own)",
            UserWarning,
            stacklevel=3,
        )


def _searchers_of(
    given: Searchers, retrieval: RetrievalConfig | None, middleware: Sequence[Any] = ()
) -> tuple[Searchers, list[tuple[str, str, Any]] | None]:
    """The searchers the graph gets (named tools as a name -> searcher mapping) and the named tools
    (a reviewer's ``interrupt_on`` naming none of the tools is said once)."""
    named = named_searchers(given)
    warn_unreviewed(middleware, [n for n, _, _ in named] if named else [SEARCH_TOOL_NAME])
    return ({n: s for n, _, s in named} if named else _searcher(given, retrieval)), named


def _given_searchers(tools: Searchers | None, searchers: Searchers | None) -> Searchers:
    """The searchers, given once under either name: ``tools=`` is ``create_agent``'s."""
    if tools is not None and searchers is not None:
        raise TypeError("give the searchers once: as tools= (create_agent's name) or searchers=, not both")
    if tools is None and searchers is None:
        raise TypeError(
            "create_parallel_search_agent needs searchers (tools=: a store name, a searcher, a list or a mapping)"
        )
    return tools if tools is not None else searchers
