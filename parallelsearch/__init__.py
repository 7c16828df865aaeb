"""ParallelSearch as a framework: the public API (docs/api.md lists every name and its job).

Everything a user needs is importable from here; the subpackages (``parallelsearch.agents``,
``.graphs``, ``.rl``, ``.stores``, ``.data``, ``.eval``) are the building blocks behind these
names and are internal: their names may change without notice. Heavy parts are imported lazily
so ``import parallelsearch`` stays cheap and the CLI starts fast.
"""

from __future__ import annotations

from typing import Any

__version__ = "0.4.0"

#: each public name and the module that defines it, grouped by job (docs/api.md)
_LAZY = {
    # the agent
    "create_parallel_search_agent": "parallelsearch.graphs.agent",
    "GraphConfig": "parallelsearch.graphs.config",
    "Episode": "parallelsearch.graphs.record",
    "SearchProtocol": "parallelsearch.agents.protocol",
    "register_protocol": "parallelsearch.agents.protocol",
    "render_prompt": "parallelsearch.agents.protocol",
    # models
    "make_policy": "parallelsearch.graphs.factory",
    "OraclePolicy": "parallelsearch.agents.policies.scripted",
    "ScriptedPolicy": "parallelsearch.agents.policies.scripted",
    "ScriptedToolChatModel": "parallelsearch.agents.policies.scripted_chat",
    # searchers, stores and data
    "open_store": "parallelsearch.registry",
    "make_searcher": "parallelsearch.graphs.factory",
    "ingest": "parallelsearch.stores.ingestion.pipeline",
    "Passage": "parallelsearch.stores.passages",
    "ParallelSearchEmbeddings": "parallelsearch.stores.encoding.langchain_embeddings",
    "ChromaStore": "parallelsearch.stores.chroma_store",
    "RetrieverClient": "parallelsearch.stores.http.retrieval_client",
    "load_questions": "parallelsearch.data.questions",
    "HOTPOTQA_SAMPLE": "parallelsearch.demo_data",
    # configuration
    "Settings": "parallelsearch.settings",
    "get_settings": "parallelsearch.settings",
    "RetrievalConfig": "parallelsearch.stores.config",
    "PolicyConfig": "parallelsearch.agents.policies.config",
    # evaluation
    "evaluate": "parallelsearch.eval.runner",
    "write_report": "parallelsearch.eval.report",
    # training
    "EnvGraph": "parallelsearch.rl.env",
    "EpisodeExecutor": "parallelsearch.rl.executor",
    "score_episode": "parallelsearch.rl.rewards",
    "score_trajectory": "parallelsearch.rl.rewards",
    "rollout": "parallelsearch.rl.rollout",
    "make_train_data": "parallelsearch.rl.data",
    "paper_preset": "parallelsearch.rl.train_config",
    "launch": "parallelsearch.rl.launch",
    # serving
    "create_app": "parallelsearch.serving.server",
    "LoopbackServer": "parallelsearch.stores.http.loopback",
}


def __getattr__(name: str) -> Any:
    mod = _LAZY.get(name)
    if mod is None:
        raise AttributeError(f"module 'parallelsearch' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(mod), name)


__all__ = sorted(_LAZY)
