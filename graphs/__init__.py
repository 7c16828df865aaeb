"""LangGraph graphs: ParallelSearch, its dag variant and the sequential, rag and direct baselines,
from already built parts (``parallelsearch.graphs.factory`` builds them from configuration).

Internal: the building blocks behind the public API in ``parallelsearch`` (docs/api.md); names here may change without notice.
"""

from parallelsearch.graphs.agent import create_parallel_search_agent
from parallelsearch.graphs.builders import (
    GRAPH_KINDS,
    SEARCHING_KINDS,
    GraphKind,
    SearchGraph,
    build_graph,
    build_parallel_search_graph,
    build_sequential_graph,
    check_graph_kind,
)
from parallelsearch.graphs.config import PER_REQUEST_KEYS, GraphConfig, GraphContext, GraphOptions
from parallelsearch.graphs.state import GraphInput, GraphOutput, SearchState

__all__ = [
    "GRAPH_KINDS",
    "PER_REQUEST_KEYS",
    "SEARCHING_KINDS",
    "GraphConfig",
    "GraphContext",
    "GraphInput",
    "GraphKind",
    "GraphOptions",
    "GraphOutput",
    "SearchGraph",
    "SearchState",
    "build_graph",
    "build_parallel_search_graph",
    "build_sequential_graph",
    "check_graph_kind",
    "create_parallel_search_agent",
]
