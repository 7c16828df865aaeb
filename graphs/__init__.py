"""LangGraph graphs: ParallelSearch (parallel fan-out) and the sequential, rag and direct baselines."""

from parallelsearch.graphs.builders import (
    GRAPH_KINDS,
    build_direct_graph,
    build_graph,
    build_parallel_search_graph,
    build_rag_graph,
    build_sequential_graph,
)
from parallelsearch.graphs.config import GraphConfig
from parallelsearch.graphs.state import GraphInput, GraphOutput, SearchState

__all__ = [
    "GRAPH_KINDS",
    "GraphConfig",
    "GraphInput",
    "GraphOutput",
    "SearchState",
    "build_direct_graph",
    "build_graph",
    "build_parallel_search_graph",
    "build_rag_graph",
    "build_sequential_graph",
]
