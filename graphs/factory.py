"""Configuration -> runtime objects: embedders, stores, searchers, policies and graphs.

This module is the one place that turns configuration models
(:class:`~parallelsearch.stores.config.RetrievalConfig`,
:class:`~parallelsearch.agents.policies.config.PolicyConfig`,
:class:`~parallelsearch.graphs.config.GraphConfig`) into the objects that run. Every entry
point goes through it: the CLI commands, ``parallelsearch serve``, ``langgraph_app.py``,
the OpenRLHF agent config and the notebooks. Changing how a store is opened or a policy
is reached is therefore one edit here (docs/architecture.md, "Configuration").

It sits in the ``graphs`` layer because it needs every part below (stores, agents,
graphs) and must be importable by ``rl``; the app's settings only produce the models.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from parallelsearch.agents.policies.base import Policy
from parallelsearch.agents.policies.config import PolicyConfig
from parallelsearch.agents.policies.spec import policy_from_spec
from parallelsearch.agents.searchers.backends import MultiStoreSearcher, RemoteSearcher, StoreSearcher
from parallelsearch.agents.searchers.base import Searcher
from parallelsearch.graphs.builders import SEARCHING_KINDS, SearchGraph, build_graph, check_graph_kind
from parallelsearch.graphs.config import GraphConfig
from parallelsearch.stores.chroma_store import ChromaStore, list_stores, make_client
from parallelsearch.stores.config import RetrievalConfig
from parallelsearch.stores.embedders import Embedder, get_embedder
from parallelsearch.stores.retrieval_client import RetrieverClient


def make_embedder(cfg: RetrievalConfig) -> Embedder:
    """The query/passage encoder; the default configuration shares one model per process."""
    if cfg.query_prefix or cfg.passage_prefix:
        return Embedder(cfg.embedding_model, query_prefix=cfg.query_prefix, passage_prefix=cfg.passage_prefix)
    return get_embedder(cfg.embedding_model)


def make_chroma_client(cfg: RetrievalConfig) -> Any:
    """A Chroma server client when ``chroma_host`` is set, else the embedded client at ``chroma_path``."""
    if not cfg.chroma_host and cfg.chroma_path is None:
        raise ValueError("no store location: set chroma_path (embedded store) or chroma_host (Chroma server)")
    return make_client(path=cfg.chroma_path, host=cfg.chroma_host, port=cfg.chroma_port)


def make_store(
    cfg: RetrievalConfig, name: str, *, create: bool = False, embedder: Embedder | None = None
) -> ChromaStore:
    """The store ``name`` where ``cfg`` says stores live; a missing one is an error unless ``create``."""
    return ChromaStore(
        name,
        client=make_chroma_client(cfg),
        embedder=embedder or make_embedder(cfg),
        create=create,
        location=cfg.location(),
    )


def describe_stores(cfg: RetrievalConfig) -> list[dict[str, Any]]:
    """Name, count, model and location of every store where ``cfg`` says stores live."""
    if not cfg.chroma_host and (cfg.chroma_path is None or not cfg.chroma_path.exists()):
        return []
    location = cfg.location()
    return [dict(row, location=location) for row in list_stores(make_chroma_client(cfg))]


def make_searcher(cfg: RetrievalConfig) -> Searcher:
    """What the graphs search: a ``/retrieve`` server, one store, or several with routing."""
    if cfg.searcher_kind() == "remote":
        assert cfg.retriever_url is not None
        return RemoteSearcher(RetrieverClient(cfg.retriever_url, timeout_s=cfg.retriever_timeout_s))
    embedder = make_embedder(cfg)
    searchers = {name: StoreSearcher(make_store(cfg, name, embedder=embedder)) for name in cfg.stores}
    return next(iter(searchers.values())) if len(searchers) == 1 else MultiStoreSearcher(searchers)


def make_policy(cfg: PolicyConfig | str, *, answer: bool = False) -> Policy:
    """The policy ``cfg`` names (a :class:`PolicyConfig` or a bare spec string), with the
    configured OpenAI base URL, key and timeout. ``answer=True`` builds the answer policy."""
    if isinstance(cfg, str):
        cfg = PolicyConfig(policy=cfg)
    spec = cfg.answer_policy if answer else cfg.policy
    if spec is None:
        raise ValueError("no answer policy is configured")
    return policy_from_spec(
        spec,
        base_url=cfg.openai_base_url,
        api_key=cfg.openai_api_key,
        timeout_s=cfg.request_timeout_s,
        constrained=cfg.constrained,
        think_chars=cfg.constrained_think_chars,
        engine_args=cfg.vllm_engine_args,
    )


def make_answer_policy(cfg: PolicyConfig) -> Policy | None:
    """The separate answer-turn policy when one is configured, else None (the policy answers)."""
    return make_policy(cfg, answer=True) if cfg.answer_policy else None


def make_graph(
    kind: str,
    *,
    policy: Policy,
    searcher: Any = None,
    graph: GraphConfig | None = None,
    answer_policy: Policy | None = None,
    checkpointer: Any = None,
) -> SearchGraph:
    """One compiled graph of ``kind`` over already built parts."""
    return build_graph(
        kind, policy, searcher, answer_policy=answer_policy, checkpointer=checkpointer, config=graph
    )


def make_graphs(
    kinds: Iterable[str],
    *,
    policy: PolicyConfig | Policy,
    retrieval: RetrievalConfig | Searcher | None,
    graph: GraphConfig | None = None,
    checkpointer: Any = None,
) -> dict[str, SearchGraph]:
    """Several graphs sharing one policy and one searcher (a server's routes, an evaluation).

    ``policy`` and ``retrieval`` may be configuration (built here) or objects already
    built (tests and notebooks pass a scripted policy or a store); the ``direct`` graph
    alone needs no searcher.
    """
    kinds = [check_graph_kind(k) for k in kinds]
    answer_policy = None
    if isinstance(policy, PolicyConfig):
        answer_policy = make_answer_policy(policy)
        policy = make_policy(policy)
    searcher = retrieval
    if isinstance(retrieval, RetrievalConfig):
        searcher = make_searcher(retrieval) if any(k != "direct" for k in kinds) else None
    return {
        kind: make_graph(
            kind,
            policy=policy,
            searcher=searcher,
            graph=graph,
            answer_policy=answer_policy if kind in SEARCHING_KINDS else None,
            checkpointer=checkpointer,
        )
        for kind in kinds
    }
