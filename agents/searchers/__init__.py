"""Searchers: a query (and k) in, passages out; every call guarded by timeout and retry."""

from parallelsearch.agents.searchers.adapters import FunctionSearcher, ObjectSearcher
from parallelsearch.agents.searchers.backends import (
    MultiStoreSearcher,
    RemoteSearcher,
    StoreSearcher,
    as_searcher,
    describe_searcher,
)
from parallelsearch.agents.searchers.base import Searcher, guarded_search
from parallelsearch.agents.searchers.normalise import SearcherOutputError, to_passages

__all__ = [
    "FunctionSearcher",
    "MultiStoreSearcher",
    "ObjectSearcher",
    "RemoteSearcher",
    "Searcher",
    "SearcherOutputError",
    "StoreSearcher",
    "as_searcher",
    "describe_searcher",
    "guarded_search",
    "to_passages",
]
