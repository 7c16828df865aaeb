"""The front door: one call from a chat model (or any policy) and searchers to a compiled
ParallelSearch graph, in the style of LangGraph's ``create_react_agent``.

Everything is a keyword argument over the builders (:mod:`parallelsearch.graphs.builders`);
store names are opened through the factory, anything else through ``as_searcher``.
"""

from __future__ import annotations

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
)
from parallelsearch.graphs.config import GraphConfig, GraphOptions
from parallelsearch.stores.config import RetrievalConfig


def _searcher(searchers: Any, retrieval: RetrievalConfig | None) -> Any:
    """Store names -> the factory's searcher (several: routed by ``name: query``); a list of
    searchers -> routing by their ``name``; anything else -> ``as_searcher``."""
    names = (
        [searchers]
        if isinstance(searchers, str) and not searchers.startswith(("http://", "https://"))
        else None
    )
    if isinstance(searchers, Sequence) and not isinstance(searchers, str) and searchers:
        if all(isinstance(s, str) and not s.startswith(("http://", "https://")) for s in searchers):
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
    if protocol == "tools":
        base = TOOLS_TEMPLATE
    else:
        base = SEARCH_R1_TEMPLATE if graph == "sequential" else PAPER_TEMPLATE
    return f"{prompt.strip()}\n\n{base}"


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
        model: the planner: a LangChain chat model, an ``init_chat_model`` string
            (``"anthropic:claude-sonnet-4-5"``), a policy spec (``"oracle"``,
            ``"openai:MODEL@URL"``, ``"vllm:PATH"``, ``"chat:PROVIDER:MODEL"`` ...) or a policy.
            A string whose prefix is one of our spec kinds is a spec (so ``openai:`` is a
            completions endpoint serving a trained checkpoint; write ``chat:openai:gpt-4o``
            for ChatOpenAI), any other ``provider:model`` goes to ``init_chat_model``.
        searchers: a store name or list of store names (opened with ``retrieval``, routed by
            ``name: query`` when several), a ``/retrieve`` URL, a searcher, retriever or
            anything ``as_searcher`` accepts, a list of them (routed by their ``name``) or a
            ``{name: searcher}`` mapping.
        protocol: ``tools`` (the model calls a ``search`` tool, several calls per message run as
            one parallel round, the answer is a message without tool calls), ``tags``
            (``<search> a ## b </search>`` text, what trained checkpoints speak) or ``auto``:
            tools for a chat model with ``bind_tools``, tags otherwise. The output's
            ``protocol`` key says which ran; the builder logs it.
        prompt: a template name (``paper``, ``official``, ``search_r1``, ``tools``), a text with
            ``{question}``, or instructions put in front of the protocol's own prompt.
        graph: ``parallel`` (ParallelSearch) or ``sequential`` (Search-R1: one query per turn).
        answer_model: a separate model for the final answer turn (tags protocol only).
        checkpointer: a LangGraph checkpointer (threads: one episode per question).
        config / options: :class:`GraphConfig` and/or its fields as keywords (``top_k``,
            ``max_turns``, ``max_subqueries``, ...); keywords win.
        name: the compiled graph's name (as a subgraph or in Studio).

    Example::

        from langchain_openai import ChatOpenAI
        from parallelsearch import create_parallel_search_agent

        agent = create_parallel_search_agent(ChatOpenAI(model="gpt-4o-mini"), my_search, top_k=3)
        out = agent.invoke({"messages": [("user", "Are Paris and Rome both capitals?")]})
        print(out["messages"][-1].content, out["search_rounds"], out["subqueries"])
    """
    if protocol not in PROTOCOLS:
        raise ValueError(f"unknown protocol {protocol!r}; choose one of {', '.join(PROTOCOLS)}")
    if graph not in ("parallel", "sequential"):
        raise ValueError(f"unknown graph {graph!r}; choose parallel or sequential")
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
