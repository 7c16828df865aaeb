"""Graph builders: ParallelSearch and its baselines from the same parts.

Each returns a compiled graph that works standalone and as a subgraph (input ``{"question",
"metadata"?}`` or ``{"messages"}``; output the answer, ``messages``, transcript, trajectory and
counts). The planner's protocol is resolved here, once; the knobs are :class:`GraphConfig`'s, as
keywords or ``config=``, and some may change per request (docs/architecture.md, "A request").
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, replace
from typing import Any, Literal, TypeAlias, get_args

from langchain_core.language_models import BaseChatModel
from langgraph._internal._runnable import RunnableCallable
from langgraph.constants import TAG_HIDDEN
from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph
from typing_extensions import Unpack

from parallelsearch.agents.policies.base import Policy
from parallelsearch.agents.policies.coerce import as_policy, resolve_protocol
from parallelsearch.agents.protocol import SearchProtocol, Tools
from parallelsearch.agents.protocol.named_tools import NamedTools
from parallelsearch.agents.searchers.backends import as_searcher
from parallelsearch.agents.searchers.base import Searcher
from parallelsearch.graphs.config import GraphConfig, GraphContext, GraphOptions
from parallelsearch.graphs.engine import EpisodeEngine
from parallelsearch.graphs.middleware import Middleware
from parallelsearch.graphs.nodes import after_join, agent_nodes, agent_router, bound_nodes, router
from parallelsearch.graphs.nodes.agent_steps import NEW_INPUT
from parallelsearch.graphs.state import (
    STRUCTURED_FIELDS,
    GraphInput,
    GraphOutput,
    SearchState,
    output_with,
    state_with,
)
from parallelsearch.graphs.structured import StructuredAnswer
from parallelsearch.graphs.sync_bridge import sync_node
from parallelsearch.graphs.wiring import (
    AGENT_STEPS,
    PAPER_STEPS,
    Steps,
    add_hook_nodes,
    hooks_before_model,
    needs_review,
    wire_search_loop,
)
from parallelsearch.stores.errors import check_choice

log = logging.getLogger(__name__)

#: what a builder takes as its planner: a policy, a LangChain chat model or a spec string
Planner: TypeAlias = Policy | BaseChatModel | str

GraphKind = Literal["parallel", "sequential", "rag", "direct", "dag"]
#: every graph kind, in the order the CLI lists them
GRAPH_KINDS: tuple[str, ...] = get_args(GraphKind)
#: the graphs that search turn by turn (the RL environment needs one of these)
SEARCHING_KINDS: tuple[str, ...] = ("parallel", "sequential", "dag")

#: what the builders return: a compiled graph over our state, context, input and output
SearchGraph: TypeAlias = CompiledStateGraph[SearchState, GraphContext, GraphInput, GraphOutput]


def check_graph_kind(kind: str, allowed: tuple[str, ...] = GRAPH_KINDS) -> str:
    """``kind`` if it is one of ``allowed``; else a ValueError that lists them (the one check)."""
    return check_choice(kind, allowed, "graph")


def _protocol_option(options: dict[str, Any]) -> SearchProtocol | None:
    """Take a protocol object out of ``options`` (a name stays: it is a :class:`GraphConfig` field)."""
    given = options.get("protocol")
    return options.pop("protocol") if isinstance(given, SearchProtocol) else None


def _resolver_option(options: dict[str, Any]) -> Any:
    """Take a resolver function or object out of ``options`` (a name stays: it is a
    :class:`GraphConfig` field); the graph's nodes use it when no name is configured."""
    given = options.get("resolver")
    if given is None or isinstance(given, str):
        return None
    return options.pop("resolver")


def _config(config: GraphConfig | None, options: dict[str, Any], **fixed: Any) -> GraphConfig:
    """``config`` (or the defaults) with ``options`` over it, validated; ``fixed`` is what the graph kind sets."""
    base = config if config is not None else GraphConfig()
    if not isinstance(base, GraphConfig):
        raise TypeError(f"config must be a GraphConfig, got {type(base).__name__}")
    cfg = base.updated(**options) if options else base
    defaults = {k: v for k, v in fixed.items() if not (k == "prompt_template" and cfg.prompt_template)}
    template = defaults.get("prompt_template", cfg.prompt_template)
    if cfg.observation_titles is None:  # released checkpoints saw quoted titles with the official prompt
        defaults["observation_titles"] = "official" if template == "official" else "stripped"
    return cfg.model_copy(update=defaults)


def _parts(
    policy: Any, cfg: GraphConfig, kind: str, answer_policy: Any = None, protocol: Any = None
) -> tuple[Any, SearchProtocol, Any]:
    """The planner as a policy, the protocol it speaks (``auto`` resolved, logged) and the answer
    policy. ``protocol``: a protocol object given to the builder (else ``cfg.protocol`` names one)."""
    pol = as_policy(policy)
    choice = protocol if protocol is not None else cfg.protocol
    if kind not in SEARCHING_KINDS:
        if choice not in ("auto", "tags"):
            raise ValueError(
                f"the {kind} graph has one answer-only turn and speaks tags; protocol={getattr(choice, 'name', choice)!r} "
                "needs a searching graph"
            )
        choice = "tags"
    spoken = resolve_protocol(choice, pol)
    if spoken.chat and answer_policy is not None:
        raise ValueError(
            f"answer_policy is for text protocols; under protocol={spoken.name!r} the planner answers"
        )
    answerer = as_policy(answer_policy) if answer_policy is not None else None
    log.info(
        "%s graph: planner %s speaks the %s protocol",
        kind,
        getattr(pol, "name", type(pol).__name__),
        spoken.name,
    )
    return pol, spoken, answerer


def _template(cfg: GraphConfig, protocol: SearchProtocol, kind: str) -> GraphConfig:
    """``cfg`` with the prompt the graph uses when none is configured: the kind's own for the
    tags protocol (paper, dag, search_r1), else the protocol's."""
    if cfg.prompt_template:
        return cfg
    template = _KIND_TEMPLATES.get(kind, "paper") if protocol.name == "tags" else protocol.default_template
    return _config(cfg, {}, prompt_template=template)


def _compile(
    builder: StateGraph, cfg: GraphConfig, checkpointer: Any, name: str, **compile_options: Any
) -> SearchGraph:
    graph = builder.compile(checkpointer=checkpointer, name=name, **compile_options)
    defaults: dict[str, Any] = {"recursion_limit": cfg.recursion_limit()}
    if cfg.max_concurrency:
        defaults["max_concurrency"] = cfg.max_concurrency
    graph.config = {**(graph.config or {}), **defaults}
    return graph


def _new_builder(
    nodes: dict[str, Callable[..., Coroutine[Any, Any, Any]]],
    state: type = SearchState,
    context: type = GraphContext,
    output: type = GraphOutput,
) -> StateGraph:
    """A builder with ``nodes``, each its async function with a sync twin (``invoke``/``stream``/``batch``)."""
    b = StateGraph(state, context_schema=context, input_schema=GraphInput, output_schema=output)
    for name, afunc in nodes.items():
        _add_node(b, name, afunc)
    return b


def _add_node(b: StateGraph, name: str, afunc: Callable[..., Coroutine[Any, Any, Any]]) -> None:
    """``afunc`` as node ``name``, with its sync twin (``invoke``/``stream``/``batch``)."""
    b.add_node(name, RunnableCallable(sync_node(afunc), afunc, name=name))


@dataclass(frozen=True)
class GraphBuild:
    """How a graph is compiled beyond its knobs (what ``create_agent`` also takes): the middleware,
    the graph's name (also its answers' ``name``), a context schema merged with the knobs', and
    LangGraph's compile options."""

    middleware: tuple[Any, ...] = ()
    name: str | None = None
    context_schema: type | None = None
    store: Any = None
    debug: bool = False
    interrupt_before: tuple[str, ...] | None = None
    interrupt_after: tuple[str, ...] | None = None
    #: searchers shown to a tool-calling model as tools of their own: (name, description)
    named_tools: tuple[tuple[str, str], ...] = ()
    #: create_agent's response_format (a strategy or a schema): the answer's structured form
    response_format: Any = None
    #: the chat agent's steps (``model``, ``tools``; wiring.AGENT_STEPS) instead of the paper
    #: graphs' ``planner``, ``search`` and ``join``, which training and the server stream read
    agent_steps: bool = False

    def compile_options(self) -> dict[str, Any]:
        out: dict[str, Any] = {"store": self.store, "debug": self.debug}
        if self.interrupt_before:
            out["interrupt_before"] = list(self.interrupt_before)
        if self.interrupt_after:
            out["interrupt_after"] = list(self.interrupt_after)
        return out


#: the tags prompt of each graph kind (a configured prompt wins; other protocols use their own)
_KIND_TEMPLATES: dict[str, str] = {"parallel": "paper", "dag": "dag", "sequential": "search_r1"}


def _search_loop(
    kind: str,
    policy: Planner,
    searcher: Searcher | None,
    answer_policy: Planner | None,
    checkpointer: Any,
    config: GraphConfig | None,
    options: dict[str, Any],
    build: GraphBuild | None = None,
) -> SearchGraph:
    """The searching graphs' one shape: begin -> planner -> ``Send`` searchers -> join -> planner
    ... -> answer (with middleware hook nodes where ``create_agent`` puts them); what differs by
    kind is the tags prompt, splitting (sequential) and ``references`` (dag)."""
    build = build or GraphBuild()
    opts = dict(options)
    resolver, protocol = _resolver_option(opts), _protocol_option(opts)
    cfg = _config(config, opts, **({"split_subqueries": False} if kind == "sequential" else {}))
    pol, spoken, answerer = _parts(policy, cfg, kind, answer_policy, protocol)
    if build.named_tools and type(spoken) is Tools:
        spoken = NamedTools(build.named_tools)
    cfg = _template(cfg, spoken, kind)
    name = build.name or ("parallelsearch" if kind == "parallel" else kind)
    mw = Middleware.of(build.middleware)
    engine = EpisodeEngine(
        pol,
        spoken,
        searcher,
        cfg,
        answerer,
        references=kind == "dag",
        graph_name=name,
        resolver=resolver,
        middleware=mw,
        structured=StructuredAnswer.of(build.response_format, getattr(pol, "model", None), spoken),
    )
    steps = _agent_steps(engine, mw, build) if build.agent_steps else PAPER_STEPS
    b = _loop_builder(engine, mw, build, steps)
    options = _entry_interrupts(build.compile_options()) if steps.opens else build.compile_options()
    return _internal_entry(_compile(b, cfg, checkpointer, name, **options), steps, build.agent_steps)


def _loop_builder(
    engine: EpisodeEngine, mw: Middleware | None, build: GraphBuild, steps: Steps
) -> StateGraph:
    """The search loop's state, nodes and edges: the paper graphs' (``planner``, ``Send``-ed
    ``search`` nodes, ``join``) or the chat agent's (``model``, ``tools``)."""
    extra = {**(mw.state_fields() if mw else {}), **(STRUCTURED_FIELDS if engine.structured else {})}
    if steps.opens:
        extra[NEW_INPUT] = bool
    output = output_with(STRUCTURED_FIELDS) if engine.structured else GraphOutput
    b = _new_builder({}, state_with(extra), build.context_schema or GraphContext, output)
    agent = build.agent_steps
    nodes = (
        agent_nodes(engine, steps)
        if agent
        else bound_nodes(engine, "begin", "planner", "search", "join", "answer")
    )
    for node, afunc in nodes.items():
        _add_node(b, node, afunc)
    add_hook_nodes(b, mw)
    if wire_search_loop(b, mw, agent_router(engine) if agent else router(engine), after_join, steps):
        _add_node(b, "review", bound_nodes(engine, "review")["review"])
    return b


def _entry_interrupts(options: dict[str, Any]) -> dict[str, Any]:
    """``options``, unless they interrupt at ``begin`` where the model step opens the episode
    (no such node: the nearest point, before ``model``, is before every turn, not once)."""
    if "begin" in [*options.get("interrupt_before", []), *options.get("interrupt_after", [])]:
        raise ValueError(
            "this agent opens an episode in its model step, so it has no 'begin' node: interrupt_before="
            "['model'] pauses before each model turn, the first one opening the episode"
        )
    return options


def _agent_steps(engine: EpisodeEngine, mw: Middleware | None, build: GraphBuild) -> Steps:
    """The chat agent's steps: the model step opens an episode unless hooks come before it, and
    closes it unless a review, an answer policy or an interrupt at ``answer`` comes after it."""
    paused = [*(build.interrupt_before or ()), *(build.interrupt_after or ())]
    closes = engine.answer_policy is None and not needs_review(mw) and "answer" not in paused
    return replace(AGENT_STEPS, closes=closes, opens=not hooks_before_model(mw))


def _internal_entry(graph: SearchGraph, steps: Steps, agent: bool) -> SearchGraph:
    """The chat agent's way into an episode: its input step sets ``new_input`` for the model
    step to open the episode with, or its ``begin`` node stays out of updates and message streams."""
    from langgraph.pregel._write import ChannelWrite, ChannelWriteEntry

    if steps.opens:
        start = graph.nodes[START]
        mark = ChannelWrite((ChannelWriteEntry(NEW_INPUT, True),))
        graph.nodes[START] = start.copy({"writers": [*start.writers, mark]})
    elif agent:
        graph.nodes["begin"].tags = [*(graph.nodes["begin"].tags or []), TAG_HIDDEN]
    return graph


def _one_turn(
    kind: str,
    policy: Planner,
    searcher: Searcher | None,
    checkpointer: Any,
    config: GraphConfig | None,
    options: dict[str, Any],
    build: GraphBuild | None = None,
) -> SearchGraph:
    """The baselines' shape: an entry node (``retrieve`` once with the question, or ``begin``),
    then one answer-only turn."""
    build = build or GraphBuild()
    if build.middleware or build.response_format is not None:
        raise ValueError(
            f"middleware and response_format need a searching graph ({', '.join(SEARCHING_KINDS)}); {kind} has none"
        )
    opts = dict(options)
    _resolver_option(opts)  # one answer-only turn: nothing to resolve
    protocol = _protocol_option(opts)
    cfg = _config(config, opts, max_turns=0)
    pol, spoken, _ = _parts(policy, cfg, kind, protocol=protocol)
    cfg = _template(cfg, spoken, kind)
    engine = EpisodeEngine(
        pol,
        spoken,
        searcher if kind == "rag" else None,
        cfg,
        pinned=frozenset({"max_turns"}),
        graph_name=build.name or kind,
    )
    entry = "retrieve" if kind == "rag" else "begin"
    b = _new_builder(
        bound_nodes(engine, entry, "planner", "answer"), context=build.context_schema or GraphContext
    )
    b.add_edge(START, entry)
    b.add_edge(entry, "planner")
    b.add_edge("planner", "answer")
    b.add_edge("answer", END)
    return _compile(b, cfg, checkpointer, build.name or kind, **build.compile_options())


class BuilderOptions(GraphOptions, total=False):
    """The paper graphs' builders' keywords: the answer turn's own policy, a LangGraph checkpointer,
    a whole :class:`GraphConfig`, and each knob of it (a knob given beside ``config`` wins)."""

    answer_policy: Planner | None
    checkpointer: Any
    config: GraphConfig | None


def build_parallel_search_graph(
    policy: Planner, searcher: Any, **options: Unpack[BuilderOptions]
) -> SearchGraph:
    """ParallelSearch: planner -> ``Send`` one searcher per sub-query -> join -> planner.

    ``searcher``: a :class:`ChromaStore`, a ``/retrieve`` URL or client, a LangChain retriever, a
    ``{name: store}`` mapping or anything with ``asearch(query, k)``. ``resolver`` may also be a
    function ``(sub_query, parents) -> str`` for the ``#k`` of dependent sub-queries.
    """
    return build_graph("parallel", policy, searcher, **options)


def build_sequential_graph(policy: Planner, searcher: Any, **options: Unpack[BuilderOptions]) -> SearchGraph:
    """Search-R1 baseline: its prompt (unless one is given), one query per search (``##`` is not split)."""
    return build_graph("sequential", policy, searcher, **options)


def build_graph(
    kind: str,
    policy: Planner,
    searcher: Any = None,
    *,
    answer_policy: Planner | None = None,
    checkpointer: Any = None,
    config: GraphConfig | None = None,
    build: GraphBuild | None = None,
    **options: Unpack[GraphOptions],
) -> SearchGraph:
    """Any graph by name: ``parallel``, ``sequential``, ``rag``, ``direct`` or ``dag``.

    ``answer_policy`` applies to the searching graphs; the one-turn baselines have no
    separate answer turn, so it is not used there. ``build``: middleware, name, compile options.
    """
    searching = check_graph_kind(kind) in SEARCHING_KINDS
    searcher = None if kind == "direct" else as_searcher(searcher)  # the one normalisation
    if searching:
        return _search_loop(kind, policy, searcher, answer_policy, checkpointer, config, options, build)
    return _one_turn(kind, policy, searcher, checkpointer, config, options, build)
