"""The agent a gateway-mode run trains: ``agent.factory = MODULE:FUNCTION``, where
``FUNCTION(model, searcher)`` returns the compiled agent (the same function a user's server
calls with ``ChatOpenAI(base_url=<vllm>)``); unset, the README chat agent."""

from __future__ import annotations

import importlib
import os
import re
import sys
from collections.abc import Callable
from typing import Any

from parallelsearch.graphs.agent import create_parallel_search_agent
from parallelsearch.graphs.config import GraphConfig

FACTORY_RE = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")
AgentFactory = Callable[[Any, Any], Any]


def check_factory_spec(spec: str) -> str:
    """``MODULE:FUNCTION`` or a ValueError showing the form."""
    if not FACTORY_RE.match(spec):
        raise ValueError(f"agent.factory {spec!r} must be MODULE:FUNCTION, e.g. my_agents:build_agent")
    return spec


def load_factory(spec: str) -> AgentFactory:
    """The function ``spec`` names, imported as Python imports it (the working directory first,
    then ``PYTHONPATH``); errors name the setting and what is missing."""
    module_name, func_name = check_factory_spec(spec).split(":")
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise ValueError(
            f"agent.factory {spec!r}: cannot import {module_name!r} ({e}); it is imported from the working "
            "directory and PYTHONPATH"
        ) from e
    func = getattr(module, func_name, None)
    if not callable(func):
        raise ValueError(f"agent.factory {spec!r}: module {module_name!r} has no function {func_name!r}")
    return func


def default_agent(graph: str, config: GraphConfig) -> AgentFactory:
    """The README chat agent with the run's graph and knobs (the tools protocol). Its prompt is
    the chat agent's own, as served: the run's ``prompt_template`` is the text environment's (the
    paper preset's ``official`` teaches ``<search>`` tags, which a tools agent must not be told);
    a run that wants other instructions gives its own ``agent.factory``."""
    own = config.model_dump(exclude_unset=True, exclude={"prompt_template"})
    chat = GraphConfig.model_validate({**own, "protocol": "tools"})

    def build(model: Any, searcher: Any) -> Any:
        return create_parallel_search_agent(
            model,
            searcher,
            graph=graph,
            protocol="tools",
            config=chat,  # type: ignore[arg-type]
        )

    return build


def not_an_agent(agent: Any) -> str | None:
    """What ``agent`` is when it is not a runnable agent (None: it is one): nothing, a chat model
    (bound to tools or not), or an object without ``ainvoke``."""
    from langchain_core.language_models import BaseLanguageModel
    from langchain_core.runnables import RunnableBinding

    if agent is None:
        return "None (does the function end without `return`?)"
    bound = agent.bound if isinstance(agent, RunnableBinding) else agent
    if isinstance(bound, BaseLanguageModel):
        return f"a chat model ({type(bound).__name__}{', bound to tools' if bound is not agent else ''}), not an agent"
    if not callable(getattr(agent, "ainvoke", None)):
        return f"{type(agent).__name__}, which has no ainvoke"
    return None


def check_agent(agent: Any, spec: str) -> Any:
    """``agent`` when it is one the gateway can run (an object with ``ainvoke`` taking the
    ``{"messages": [...]}`` input, as a compiled LangGraph graph or ``create_agent``'s), else a
    one-line ValueError naming ``agent.factory`` and what it returned."""
    problem = not_an_agent(agent)
    if problem is None:
        return agent
    raise ValueError(
        f"agent.factory {spec!r} returned {problem}: FUNCTION(model, searcher) must return the compiled agent "
        "built with the model it is given (create_agent(model, tools), create_parallel_search_agent(model, "
        "searcher), a compiled LangGraph graph)"
    )


def gateway_agent(agent_cfg: Any, model: Any, searcher: Any) -> Any:
    """The compiled agent a gateway-mode run trains (``agent.factory``, else the README chat agent),
    built with ``model`` and ``searcher``: what the executor and ``train --check`` both run. A
    factory that returns no agent is a ValueError naming ``agent.factory``."""
    if not agent_cfg.factory:
        return default_agent(agent_cfg.graph, agent_cfg.graph_config)(model, searcher)
    return check_agent(load_factory(agent_cfg.factory)(model, searcher), agent_cfg.factory)
