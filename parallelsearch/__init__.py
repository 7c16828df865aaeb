"""ParallelSearch as a framework: the public import surface.

Heavy parts (graphs, policies, RL) are imported lazily so ``import parallelsearch``
stays cheap and the CLI starts fast.
"""

from __future__ import annotations

from typing import Any

__version__ = "0.3.0"

_LAZY = {
    "Settings": "parallelsearch.settings",
    "get_settings": "parallelsearch.settings",
    "open_store": "parallelsearch.registry",
    "RetrievalConfig": "parallelsearch.stores.config",
    "PolicyConfig": "parallelsearch.agents.policies.config",
    "GraphConfig": "parallelsearch.graphs.config",
    "make_embedder": "parallelsearch.stores.encoding.embedder",
    "ParallelSearchEmbeddings": "parallelsearch.stores",
    "make_store": "parallelsearch.graphs.factory",
    "make_searcher": "parallelsearch.graphs.factory",
    "make_policy": "parallelsearch.graphs.factory",
    "make_parts": "parallelsearch.graphs.factory",
    "GraphParts": "parallelsearch.graphs.factory",
    "load_questions": "parallelsearch.data",
    "ChromaStore": "parallelsearch.stores",
    "Passage": "parallelsearch.stores",
    "RetrieverClient": "parallelsearch.stores",
    "ingest": "parallelsearch.stores",
    "build_graph": "parallelsearch.graphs",
    "build_parallel_search_graph": "parallelsearch.graphs",
    "build_sequential_graph": "parallelsearch.graphs",
    "create_parallel_search_agent": "parallelsearch.graphs",
    "ChatModelPolicy": "parallelsearch.agents.policies",
    "ScriptedToolChatModel": "parallelsearch.agents.policies",
    "as_policy": "parallelsearch.agents.policies",
    "as_searcher": "parallelsearch.agents.searchers",
    "policy_from_spec": "parallelsearch.agents.policies",
    "score_trajectory": "parallelsearch.rl",
    "EnvGraph": "parallelsearch.rl",
    "evaluate": "parallelsearch.eval",
    "write_report": "parallelsearch.eval",
    "create_app": "parallelsearch.server",
}


def __getattr__(name: str) -> Any:
    mod = _LAZY.get(name)
    if mod is None:
        raise AttributeError(f"module 'parallelsearch' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(mod), name)


__all__ = sorted(_LAZY)
