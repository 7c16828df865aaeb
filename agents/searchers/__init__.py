"""Searchers: a query (and k) in, passages out; every call guarded by timeout and retry."""

from parallelsearch.agents.searchers.adapters import (
    FunctionSearcher,
    LangChainRetrieverSearcher,
    ObjectSearcher,
    RunnableSearcher,
    ToolSearcher,
    VectorStoreSearcher,
)
from parallelsearch.agents.searchers.backends import (
    ACCEPTED_SEARCHERS,
    MultiStoreSearcher,
    RemoteSearcher,
    StoreSearcher,
    as_searcher,
    describe_searcher,
    reciprocal_rank_fusion,
)
from parallelsearch.agents.searchers.base import Searcher, SearchOutcome, guarded_search, store_names
from parallelsearch.agents.searchers.normalise import SearcherOutputError, to_passages

__all__ = [
    "ACCEPTED_SEARCHERS",
    "FunctionSearcher",
    "LangChainRetrieverSearcher",
    "MultiStoreSearcher",
    "ObjectSearcher",
    "RemoteSearcher",
    "RunnableSearcher",
    "SearchOutcome",
    "Searcher",
    "SearcherOutputError",
    "StoreSearcher",
    "ToolSearcher",
    "VectorStoreSearcher",
    "as_searcher",
    "describe_searcher",
    "guarded_search",
    "reciprocal_rank_fusion",
    "store_names",
    "to_passages",
]
