"""The episode engine: the parts one compiled graph runs with (policy, protocol, searcher,
configuration, resolver) and the per-run configuration its nodes read. The nodes themselves are
functions of the engine in ``parallelsearch.graphs.nodes``; the builders bind them."""

from __future__ import annotations

import asyncio
import functools
import logging
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.runtime import Runtime

from parallelsearch.agents.policies.base import Policy
from parallelsearch.agents.protocol import ObservationStyle, SearchProtocol
from parallelsearch.agents.resolvers import Resolver, ResolverError, as_resolver, searcher_encoder
from parallelsearch.agents.searchers.base import Searcher, store_names
from parallelsearch.graphs.config import PER_REQUEST_KEYS, GraphConfig, check_request_keys, request_overrides
from parallelsearch.graphs.middleware import Middleware

log = logging.getLogger(__name__)


@dataclass
class EpisodeEngine:
    """What every node of one graph shares. ``pinned``: per-request keys this graph kind does not
    let a request change; ``references``: the turns tell the policy ``#k`` is welcome (dag)."""

    policy: Policy
    protocol: SearchProtocol
    searcher: Searcher | None
    cfg: GraphConfig
    answer_policy: Policy | None = None
    pinned: frozenset[str] = frozenset()
    references: bool = False
    graph_name: str = "parallelsearch"
    resolver: Any = None  # the builder's resolver function or object, if any
    middleware: Middleware | None = None  # LangChain agent middleware, hooks in create_agent's places
    structured: Any = None  # the answer's response_format (graphs/structured.py), if any
    stores: list[str] = field(init=False)
    warned: bool = field(default=False, init=False)  # the all-invalid warning, once per graph
    _sems: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore] = field(
        default_factory=weakref.WeakKeyDictionary, init=False
    )
    _resolvers: dict[str, Resolver] = field(default_factory=dict, init=False)
    _per_request: dict[tuple[tuple[str, Any], ...], GraphConfig] = field(default_factory=dict, init=False)

    def __post_init__(self) -> None:
        self.stores = store_names(self.searcher) if self.searcher is not None else []
        if self.resolver is not None:
            self.resolver = as_resolver(self.resolver)

    def configured(self, config: RunnableConfig | None, runtime: Runtime | None) -> GraphConfig:
        """This run's configuration: the graph's, with the request's overrides from
        ``configurable`` and LangGraph's runtime ``context`` (which wins), but the pinned keys."""
        configurable = (config or {}).get("configurable") or {}
        context = getattr(runtime, "context", None)
        check_request_keys(configurable, "configurable")
        check_request_keys(context, "context")
        if context is None and not any(k in configurable for k in PER_REQUEST_KEYS):
            return self.cfg  # most runs set none: nothing is validated or copied
        overrides = request_overrides(configurable, context)
        given = tuple(sorted((k, v) for k, v in overrides.items() if k not in self.pinned))
        cfg = self._per_request.get(given)
        if cfg is None:  # validated once per distinct request: nodes ask often
            if len(self._per_request) >= 256:
                self._per_request.clear()
            cfg = self._per_request[given] = self.cfg.updated(**dict(given))
        return cfg

    @functools.cached_property
    def tools(self) -> dict[str, Any]:
        """The model's tools as LangChain tools, by name, for middleware that inspect them."""
        from parallelsearch.graphs.nodes.wrapped import search_tools

        return search_tools(self)

    @property
    def search_tool(self) -> Any:
        """The first of :attr:`tools` (the one ``search`` tool unless searchers are named)."""
        return next(iter(self.tools.values()))

    def wraps_tools(self) -> bool:
        return bool(self.middleware and self.middleware.with_hook("wrap_tool_call"))

    def style(self) -> ObservationStyle:
        return ObservationStyle.of(self.cfg)

    def semaphore(self) -> asyncio.Semaphore | None:
        """This loop's limit on searcher nodes running at once (``max_concurrency``), if any."""
        if not self.cfg.max_concurrency:
            return None
        loop = asyncio.get_running_loop()  # a semaphore belongs to the loop it is first awaited on
        for closed in [seen for seen in self._sems if seen.is_closed()]:
            del self._sems[closed]  # a semaphore that waited holds its loop: weak keys alone keep it
        sem = self._sems.get(loop)
        if sem is None:
            sem = self._sems[loop] = asyncio.Semaphore(self.cfg.max_concurrency)
        return sem

    def resolver_for(self, cfg: GraphConfig) -> Resolver:
        """The run's resolver: the request's or the config's name, else the builder's, else
        ``passage``; each named one is made once per graph."""
        name = cfg.resolver
        if name is None and self.resolver is not None:
            return self.resolver
        name = name or "passage"
        if name not in self._resolvers:
            extractor = self.answer_policy if self.answer_policy is not None else self.policy
            if name == "policy" and getattr(extractor, "name", None) == "external":
                raise ResolverError(
                    "resolver 'policy' asks the model for each #k, but this graph's policy is supplied by a "
                    "trainer turn by turn; use resolver 'passage' (or a function) in the RL environment"
                )
            self._resolvers[name] = as_resolver(
                name, searcher=self.searcher, policy=extractor, embedder=searcher_encoder(self.searcher)
            )
        return self._resolvers[name]

    def warn_unanswered(self, turns: Sequence[Mapping[str, Any]]) -> None:
        """Say once per graph when every turn of an unanswered episode was invalid: a planner that
        never speaks the protocol (a chat model under tags) would otherwise fail silently."""
        if self.warned or not turns or any(t.get("action") != "invalid" for t in turns):
            return
        self.warned = True
        log.warning(
            "%s: every one of %d planner turns was invalid (first: %s); the episode ended unanswered. "
            "Does the planner speak the %s protocol?%s",
            getattr(self.policy, "name", type(self.policy).__name__),
            len(turns),
            turns[0].get("reason"),
            self.protocol.name,
            " A chat model that supports bind_tools can use protocol='tools'."
            if not self.protocol.tools
            else "",
        )
