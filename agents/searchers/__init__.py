"""Searchers: a query (and k) in, passages out; every call guarded by timeout and retry."""

from parallelsearch.agents.searchers.backends import (
    LangChainRetrieverSearcher,
    MultiStoreSearcher,
    RemoteSearcher,
    StoreSearcher,
    as_searcher,
    describe_searcher,
    reciprocal_rank_fusion,
)
from parallelsearch.agents.searchers.base import Searcher, SearchOutcome, guarded_search, store_names

__all__ = [
    "LangChainRetrieverSearcher",
    "MultiStoreSearcher",
    "RemoteSearcher",
    "SearchOutcome",
    "Searcher",
    "StoreSearcher",
    "as_searcher",
    "describe_searcher",
    "guarded_search",
    "reciprocal_rank_fusion",
    "store_names",
]
