"""The front door: one call from a chat model (or any policy) and searchers to a compiled
ParallelSearch graph, in the style of LangGraph's ``create_react_agent``, over the builders.
"""

from __future__ import annotations

import difflib
import inspect
from collections.abc import Sequence
from typing import Any, Literal

from typing_extensions import Unpack

from parallelsearch.agents.policies.coerce import PROTOCOLS, ProtocolChoice
from parallelsearch.agents.protocol import (
    PAPER_TEMPLATE,
    SEARCH_R1_TEMPLATE,
    TEMPLATES,
    TOOL_TEMPLATES,
    TOOLS_TEMPLATE,
)
from parallelsearch.agents.searchers.backends import as_searcher
from parallelsearch.graphs.builders import (
    Planner,
    SearchGraph,
    build_parallel_search_graph,
    build_sequential_graph,
    check_graph_kind,
)
from parallelsearch.graphs.config import GraphConfig, GraphOptions
from parallelsearch.stores.config import RetrievalConfig
from parallelsearch.stores.errors import check_choice

#: names other search APIs give a knob of this graph (a retriever's ``k`` is the graph's ``top_k``)
_ALIASES = {
    "k": "top_k",
    "n": "top_k",
    "limit": "top_k",
    "num_results": "top_k",
    "max_results": "top_k",
    "search_kwargs": "top_k",
    "max_iterations": "max_turns",
    "max_steps": "max_turns",
}
#: keywords of LangChain's ``create_agent`` (and LangGraph's ``create_react_agent``), with what does
#: the same job here where something does
_AGENT_KEYWORDS = {
    "system_prompt": "prompt= puts instructions in front of the protocol's prompt",
    "tools": "the searchers are the second argument",
    "debug": "invoke/stream take debug=True",
    "interrupt_before": "invoke/stream take interrupt_before=[node], with a checkpointer",
    "interrupt_after": "invoke/stream take interrupt_after=[node], with a checkpointer",
    "middleware": "",
    "store": "",
    "context_schema": "",
    "response_format": "",
    "state_schema": "",
    "pre_model_hook": "",
    "post_model_hook": "",
}


def _check_keywords(options: dict[str, Any]) -> None:
    """A TypeError naming the first keyword that is neither this function's nor a :class:`GraphConfig`
    field, with the closest known one, instead of pydantic's "Extra inputs are not permitted"."""
    params = [p for p in inspect.signature(create_parallel_search_agent).parameters if p != "options"]
    known = list(dict.fromkeys([*params[2:], *GraphConfig.model_fields]))
    for key in options:
        if key in GraphConfig.model_fields:
            continue
        said = f"create_parallel_search_agent() got an unexpected keyword argument {key!r}"
        if key in _AGENT_KEYWORDS:
            how = _AGENT_KEYWORDS[key]
            said += f" (a keyword of LangChain's create_agent{'; here ' + how if how else ''})"
        else:
            close = _ALIASES.get(key) or next(iter(difflib.get_close_matches(key, known, n=1)), None)
            said += f" (did you mean {close!r}?)" if close else ""
        raise TypeError(f"{said}; it takes {', '.join(known)}")


def _is_store_name(given: Any) -> bool:
    return isinstance(given, str) and not given.startswith(("http://", "https://"))


def _searcher(searchers: Any, retrieval: RetrievalConfig | None) -> Any:
    """Store names -> the factory's searcher (several: routed by ``name: query``); a list of
    searchers -> routing by their ``name``; anything else -> ``as_searcher``."""
    names = [searchers] if _is_store_name(searchers) else None
    if isinstance(searchers, Sequence) and not isinstance(searchers, str) and searchers:
        if all(_is_store_name(s) for s in searchers):
            names = list(searchers)
        else:
            routed: dict[str, Any] = {}
            for i, s in enumerate(searchers):
                key = getattr(s, "name", None) or (s if isinstance(s, str) else f"searcher{i}")
                if key in routed:
                    raise ValueError(
                        f"two searchers are named {key!r}; pass a {{name: searcher}} mapping instead"
                    )
                routed[str(key)] = s
            return as_searcher(routed)
    if names is not None:
        from parallelsearch.graphs.factory import make_searcher

        base = retrieval or RetrievalConfig()
        return make_searcher(
            RetrievalConfig.model_validate({**base.model_dump(exclude_unset=True), "stores": names})
        )
    if searchers is None:
        raise TypeError(
            "create_parallel_search_agent needs searchers (a store name, a searcher, a list or a mapping)"
        )
    return as_searcher(searchers)


def _prompt(prompt: str | None, protocol: str, graph: str) -> str | None:
    """A template name or a text with ``{question}`` is the prompt; any other text is put in
    front of the protocol's own prompt, as instructions."""
    if prompt is None or prompt in TEMPLATES or prompt in TOOL_TEMPLATES or "{question}" in prompt:
        return prompt
    tags = SEARCH_R1_TEMPLATE if graph == "sequential" else PAPER_TEMPLATE
    return f"{prompt.strip()}\n\n{TOOLS_TEMPLATE if protocol == 'tools' else tags}"


def create_parallel_search_agent(
    model: Planner,
    searchers: Any,
    *,
    protocol: ProtocolChoice = "auto",
    prompt: str | None = None,
    graph: Literal["parallel", "sequential"] = "parallel",
    answer_model: Planner | None = None,
    retrieval: RetrievalConfig | None = None,
    checkpointer: Any = None,
    config: GraphConfig | None = None,
    name: str | None = None,
    **options: Unpack[GraphOptions],
) -> SearchGraph:
    """A compiled ParallelSearch graph: the planner decomposes, searchers run in parallel.

    Args:
        model: the planner: a LangChain chat model (not pre-bound: the graph binds its ``search``
            tool), a policy, an ``init_chat_model`` string (``"openai:gpt-4o-mini"``) or one of this
            project's specs (``"openai:MODEL@URL"`` = a completions endpoint serving a trained
            checkpoint, ``"vllm:PATH"``, ``"hf:PATH"``, ``"oracle"``, ``"scripted:FILE"``,
            ``"chat:PROVIDER:MODEL"``, ``"external"``); an ambiguous string is refused.
        searchers: a store name or list of them (opened with ``retrieval``, routed by
            ``name: query`` when several), a ``/retrieve`` URL, anything ``as_searcher`` accepts,
            a list of them (routed by their ``name``) or a ``{name: searcher}`` mapping.
        protocol: ``tools`` (the model calls a ``search`` tool; several calls per message run as
            one parallel round), ``tags`` (``<search> a ## b </search>`` text, what trained
            checkpoints speak) or ``auto``: tools for a chat model with ``bind_tools``.
        prompt: a template name (``paper``, ``official``, ``search_r1``, ``tools``), a text with
            ``{question}``, or instructions put in front of the protocol's own prompt.
        graph: ``parallel`` (ParallelSearch) or ``sequential`` (Search-R1: one query per turn).
        answer_model: a separate model for the final answer turn (tags protocol only).
        checkpointer: a LangGraph checkpointer (threads: one episode per question).
        config / options: :class:`GraphConfig` and/or its fields as keywords (``top_k``,
            ``max_turns``, ``max_subqueries``, ...); keywords win. Any other keyword is a
            TypeError naming the closest known one.
        name: the compiled graph's name (as a subgraph or in Studio).

    Example: README.md, "A chat model and your searcher".
    """
    _check_keywords(options)
    check_choice(protocol, PROTOCOLS, "protocol")
    check_graph_kind(graph, ("parallel", "sequential"))
    build = build_parallel_search_graph if graph == "parallel" else build_sequential_graph
    opts: dict[str, Any] = {**options, "protocol": protocol}
    if prompt is not None:
        from parallelsearch.agents.policies.coerce import as_policy, policy_protocol

        planner = as_policy(model, protocol)
        model = planner
        opts["prompt_template"] = _prompt(prompt, policy_protocol(planner), graph)
    out = build(
        model,
        _searcher(searchers, retrieval),
        answer_policy=answer_model,
        checkpointer=checkpointer,
        config=config,
        **opts,
    )
    if name:
        out.name = name
    return out
