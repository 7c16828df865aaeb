"""Graphs for ``langgraph dev`` / LangGraph Platform (see ``langgraph.json`` at the repository root).

Built from settings at import: ``PARALLELSEARCH_POLICY`` (a policy spec), and
``PARALLELSEARCH_STORES`` (JSON list of store names) or ``PARALLELSEARCH_RETRIEVER_URL``.
No checkpointer is attached: the platform brings its own.
"""

from __future__ import annotations

from typing import Any

from parallelsearch.agents.policies import policy_from_spec
from parallelsearch.graphs import build_graph
from parallelsearch.registry import searcher_for
from parallelsearch.settings import get_settings


def make_graph(kind: str = "parallel") -> Any:
    s = get_settings()
    return build_graph(kind, policy_from_spec(s.policy), searcher_for(settings=s), **s.graph)


graph = make_graph("parallel")
sequential = make_graph("sequential")
rag = make_graph("rag")
