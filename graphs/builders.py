"""Graph builders: ParallelSearch and its baselines from the same parts.

Each returns a compiled LangGraph graph that works standalone and as a subgraph:
input ``{"question", "metadata"?}``, output answer + transcript + trajectory + counts.
The knobs are :class:`GraphConfig`'s fields, given as keyword arguments (typed through
:class:`GraphOptions`) or as one ``config=GraphConfig(...)``; keyword arguments win.
Every graph carries :class:`GraphContext` as its context schema, so a run can change
``top_k``, ``max_turns``, ``max_subqueries`` and the sampling settings per request
(docs/architecture.md, "A request"). Every run with input enters through the node that
opens an episode (``begin``; ``retrieve`` in the RAG graph), so on a checkpointed thread
each new question is a fresh episode and the earlier ones stay in ``history``
(docs/architecture.md, "Threads").
"""

from __future__ import annotations

from typing import Any, Literal, TypeAlias, get_args

from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph
from typing_extensions import Unpack

from parallelsearch.agents.policies.base import Policy
from parallelsearch.agents.searchers.backends import as_searcher
from parallelsearch.graphs.config import GraphConfig, GraphContext, GraphOptions
from parallelsearch.graphs.nodes import Nodes
from parallelsearch.graphs.state import GraphInput, GraphOutput, SearchState

GraphKind = Literal["parallel", "sequential", "rag", "direct"]
#: every graph kind, in the order the CLI lists them
GRAPH_KINDS: tuple[str, ...] = get_args(GraphKind)
#: the graphs that search turn by turn (the RL environment needs one of these)
SEARCHING_KINDS: tuple[str, ...] = ("parallel", "sequential")

#: what the builders return: a compiled graph over our state, context, input and output
SearchGraph: TypeAlias = CompiledStateGraph[SearchState, GraphContext, GraphInput, GraphOutput]


def check_graph_kind(kind: str, allowed: tuple[str, ...] = GRAPH_KINDS) -> str:
    """``kind`` if it is one of ``allowed``; else a ValueError that lists them (the one check)."""
    if kind not in allowed:
        raise ValueError(f"unknown graph {kind!r}; choose one of {', '.join(allowed)}")
    return kind


def _config(config: GraphConfig | None, options: dict[str, Any], **fixed: Any) -> GraphConfig:
    """``config`` (or the defaults) with ``options`` over it, validated; ``fixed`` is what the graph kind sets."""
    base = config if config is not None else GraphConfig()
    if not isinstance(base, GraphConfig):
        raise TypeError(f"config must be a GraphConfig, got {type(base).__name__}")
    cfg = base.updated(**options) if options else base
    defaults = {k: v for k, v in fixed.items() if not (k == "prompt_template" and cfg.prompt_template)}
    template = defaults.get("prompt_template", cfg.prompt_template)
    if cfg.observation_titles is None:  # released checkpoints saw quoted titles with the official prompt
        defaults["observation_titles"] = "official" if template == "official" else "stripped"
    return cfg.model_copy(update=defaults)


def _compile(builder: StateGraph, cfg: GraphConfig, checkpointer: Any, name: str) -> SearchGraph:
    graph = builder.compile(checkpointer=checkpointer, name=name)
    defaults: dict[str, Any] = {"recursion_limit": cfg.recursion_limit()}
    if cfg.max_concurrency:
        defaults["max_concurrency"] = cfg.max_concurrency
    graph.config = {**(graph.config or {}), **defaults}
    return graph


def _new_builder() -> StateGraph:
    return StateGraph(
        SearchState, context_schema=GraphContext, input_schema=GraphInput, output_schema=GraphOutput
    )


def _search_loop(nodes: Nodes, cfg: GraphConfig, checkpointer: Any, name: str) -> SearchGraph:
    b = _new_builder()
    b.add_node("begin", nodes.begin)
    b.add_node("planner", nodes.planner)
    b.add_node("search", nodes.search)
    b.add_node("join", nodes.join)
    b.add_node("answer", nodes.answer)
    b.add_edge(START, "begin")
    b.add_edge("begin", "planner")
    b.add_conditional_edges("planner", nodes.route, ["search", "planner", "answer"])
    b.add_edge("search", "join")
    b.add_edge("join", "planner")
    b.add_edge("answer", END)
    return _compile(b, cfg, checkpointer, name)


def build_parallel_search_graph(
    policy: Policy,
    searcher: Any,
    *,
    answer_policy: Policy | None = None,
    checkpointer: Any = None,
    config: GraphConfig | None = None,
    **options: Unpack[GraphOptions],
) -> SearchGraph:
    """ParallelSearch: planner -> ``Send`` one searcher per sub-query -> join -> planner.

    ``searcher``: a :class:`ChromaStore`, a ``/retrieve`` URL or client, a LangChain
    retriever, a ``{name: store}`` mapping (multi-store routing) or any object with
    ``asearch(query, k)``. Knobs: ``config`` and/or :class:`GraphOptions` keywords.
    """
    cfg = _config(config, dict(options), prompt_template="paper")
    return _search_loop(
        Nodes(policy, as_searcher(searcher), cfg, answer_policy), cfg, checkpointer, "parallelsearch"
    )


def build_sequential_graph(
    policy: Policy,
    searcher: Any,
    *,
    answer_policy: Policy | None = None,
    checkpointer: Any = None,
    config: GraphConfig | None = None,
    **options: Unpack[GraphOptions],
) -> SearchGraph:
    """Search-R1 baseline: its prompt (unless one is given), one query per search (``##`` is not split)."""
    cfg = _config(config, dict(options), prompt_template="search_r1", split_subqueries=False)
    return _search_loop(
        Nodes(policy, as_searcher(searcher), cfg, answer_policy), cfg, checkpointer, "sequential"
    )


def build_rag_graph(
    policy: Policy,
    searcher: Any,
    *,
    checkpointer: Any = None,
    config: GraphConfig | None = None,
    **options: Unpack[GraphOptions],
) -> SearchGraph:
    """RAG baseline: retrieve once with the question, then one answer-only turn.

    ``retrieve`` is its entry node, so it also opens the episode (no ``begin`` node)."""
    cfg = _config(config, dict(options), prompt_template="paper", max_turns=0)
    nodes = Nodes(policy, as_searcher(searcher), cfg, pinned=("max_turns",))
    b = _new_builder()
    b.add_node("retrieve", nodes.retrieve_once)
    b.add_node("planner", nodes.planner)
    b.add_node("answer", nodes.answer)
    b.add_edge(START, "retrieve")
    b.add_edge("retrieve", "planner")
    b.add_edge("planner", "answer")
    b.add_edge("answer", END)
    return _compile(b, cfg, checkpointer, "rag")


def build_direct_graph(
    policy: Policy,
    searcher: Any = None,
    *,
    checkpointer: Any = None,
    config: GraphConfig | None = None,
    **options: Unpack[GraphOptions],
) -> SearchGraph:
    """Direct baseline: no retrieval, one answer-only turn."""
    cfg = _config(config, dict(options), prompt_template="paper", max_turns=0)
    nodes = Nodes(policy, None, cfg, pinned=("max_turns",))
    b = _new_builder()
    b.add_node("begin", nodes.begin)
    b.add_node("planner", nodes.planner)
    b.add_node("answer", nodes.answer)
    b.add_edge(START, "begin")
    b.add_edge("begin", "planner")
    b.add_edge("planner", "answer")
    b.add_edge("answer", END)
    return _compile(b, cfg, checkpointer, "direct")


_BUILDERS = {
    "parallel": build_parallel_search_graph,
    "sequential": build_sequential_graph,
    "rag": build_rag_graph,
    "direct": build_direct_graph,
}


def build_graph(
    kind: str,
    policy: Policy,
    searcher: Any = None,
    *,
    answer_policy: Policy | None = None,
    checkpointer: Any = None,
    config: GraphConfig | None = None,
    **options: Unpack[GraphOptions],
) -> SearchGraph:
    """Any graph by name: ``parallel``, ``sequential``, ``rag`` or ``direct``.

    ``answer_policy`` applies to the searching graphs; the one-turn baselines have no
    separate answer turn, so it is not used there.
    """
    check_graph_kind(kind)
    extra: dict[str, Any] = {"answer_policy": answer_policy} if kind in SEARCHING_KINDS else {}
    return _BUILDERS[kind](policy, searcher, checkpointer=checkpointer, config=config, **extra, **options)
