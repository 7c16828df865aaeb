"""ParallelSearch as a framework: the public import surface.

Heavy parts (graphs, policies, RL) are imported lazily so ``import parallelsearch``
stays cheap and the CLI starts fast.
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"

_LAZY = {
    "Settings": "parallelsearch.settings",
    "get_settings": "parallelsearch.settings",
    "open_store": "parallelsearch.registry",
    "ChromaStore": "parallelsearch.stores",
    "Passage": "parallelsearch.stores",
    "RetrieverClient": "parallelsearch.stores",
    "ingest": "parallelsearch.stores",
    "build_graph": "parallelsearch.graphs",
    "build_parallel_search_graph": "parallelsearch.graphs",
    "build_sequential_graph": "parallelsearch.graphs",
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
