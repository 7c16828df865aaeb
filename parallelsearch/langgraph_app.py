"""Graphs for ``langgraph dev`` / LangGraph Agent Server (see ``langgraph.json`` at the repository root).

``langgraph.json`` names them by module path (``parallelsearch.langgraph_app:graph``), so the
server finds them from any working directory once the package is installed. Built from the
settings at import, through :meth:`~parallelsearch.settings.Settings.graph_parts` (as the CLI and
the server): ``PARALLELSEARCH_POLICY``
(a policy spec), ``PARALLELSEARCH_STORES`` (store names) or ``PARALLELSEARCH_RETRIEVER_URL``,
``PARALLELSEARCH_GRAPH__*`` (graph knobs). No checkpointer is attached: the server brings
its own and keeps the threads; every run with a new question is a new episode on its
thread (docs/architecture.md, "Threads"). Each run may set the per-request knobs
(``top_k``, ``max_turns``, ...) in its context or ``configurable``.
"""

from __future__ import annotations

from parallelsearch.settings import get_settings

_parts = get_settings().graph_parts(["parallel", "sequential", "rag", "dag"])
graph = _parts.graph("parallel")
sequential = _parts.graph("sequential")
rag = _parts.graph("rag")
dag = _parts.graph("dag")
