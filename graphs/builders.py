"""Graph builders: ParallelSearch and its baselines from the same parts.

Each returns a compiled LangGraph graph that works standalone and as a subgraph:
input ``{"question", "metadata"?}``, output answer + transcript + trajectory + counts.
"""

from __future__ import annotations

from typing import Any

from langgraph.graph import END, START, StateGraph
from parallelsearch.agents.policies.base import Policy
from parallelsearch.agents.searchers.backends import as_searcher
from parallelsearch.graphs.config import GraphConfig
from parallelsearch.graphs.nodes import Nodes
from parallelsearch.graphs.state import GraphInput, GraphOutput, SearchState

GRAPH_KINDS = ("parallel", "sequential", "rag", "direct")


def _compile(builder: StateGraph, cfg: GraphConfig, checkpointer: Any, name: str) -> Any:
    graph = builder.compile(checkpointer=checkpointer, name=name)
    defaults: dict[str, Any] = {"recursion_limit": cfg.recursion_limit()}
    if cfg.max_concurrency:
        defaults["max_concurrency"] = cfg.max_concurrency
    graph.config = {**(graph.config or {}), **defaults}
    return graph


def _search_loop(nodes: Nodes, cfg: GraphConfig, checkpointer: Any, name: str) -> Any:
    b = StateGraph(SearchState, input_schema=GraphInput, output_schema=GraphOutput)
    b.add_node("planner", nodes.planner)
    b.add_node("search", nodes.search)
    b.add_node("join", nodes.join)
    b.add_node("answer", nodes.answer)
    b.add_edge(START, "planner")
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
    **config: Any,
) -> Any:
    """ParallelSearch: planner -> ``Send`` one searcher per sub-query -> join -> planner.

    ``searcher``: a :class:`ChromaStore`, a ``/retrieve`` URL or client, a LangChain
    retriever, a ``{name: store}`` mapping (multi-store routing) or any object with
    ``asearch(query, k)``. ``config``: fields of :class:`GraphConfig`.
    """
    cfg = GraphConfig(**config)
    return _search_loop(
        Nodes(policy, as_searcher(searcher), cfg, answer_policy), cfg, checkpointer, "parallelsearch"
    )


def build_sequential_graph(
    policy: Policy,
    searcher: Any,
    *,
    answer_policy: Policy | None = None,
    checkpointer: Any = None,
    **config: Any,
) -> Any:
    """Search-R1 baseline: its prompt, one query per search (``##`` is not split)."""
    config = {"prompt_template": "search_r1", **config, "split_subqueries": False}
    cfg = GraphConfig(**config)
    return _search_loop(
        Nodes(policy, as_searcher(searcher), cfg, answer_policy), cfg, checkpointer, "sequential"
    )


def build_rag_graph(policy: Policy, searcher: Any, *, checkpointer: Any = None, **config: Any) -> Any:
    """RAG baseline: retrieve once with the question, then one answer-only turn."""
    cfg = GraphConfig(**{**config, "max_turns": 0})
    nodes = Nodes(policy, as_searcher(searcher), cfg)
    b = StateGraph(SearchState, input_schema=GraphInput, output_schema=GraphOutput)
    b.add_node("retrieve", nodes.retrieve_once)
    b.add_node("planner", nodes.planner)
    b.add_node("answer", nodes.answer)
    b.add_edge(START, "retrieve")
    b.add_edge("retrieve", "planner")
    b.add_edge("planner", "answer")
    b.add_edge("answer", END)
    return _compile(b, cfg, checkpointer, "rag")


def build_direct_graph(
    policy: Policy, searcher: Any = None, *, checkpointer: Any = None, **config: Any
) -> Any:
    """Direct baseline: no retrieval, one answer-only turn."""
    cfg = GraphConfig(**{**config, "max_turns": 0})
    nodes = Nodes(policy, None, cfg)
    b = StateGraph(SearchState, input_schema=GraphInput, output_schema=GraphOutput)
    b.add_node("planner", nodes.planner)
    b.add_node("answer", nodes.answer)
    b.add_edge(START, "planner")
    b.add_edge("planner", "answer")
    b.add_edge("answer", END)
    return _compile(b, cfg, checkpointer, "direct")


def build_graph(kind: str, policy: Policy, searcher: Any = None, **kwargs: Any) -> Any:
    """Any graph by name: ``parallel``, ``sequential``, ``rag`` or ``direct``."""
    builders = {
        "parallel": build_parallel_search_graph,
        "sequential": build_sequential_graph,
        "rag": build_rag_graph,
        "direct": build_direct_graph,
    }
    if kind not in builders:
        raise ValueError(f"unknown graph {kind!r}; choose one of {', '.join(GRAPH_KINDS)}")
    if kind in ("rag", "direct"):
        kwargs.pop("answer_policy", None)
    return builders[kind](policy, searcher, **kwargs)
