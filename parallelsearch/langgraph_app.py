"""Graphs for ``langgraph dev`` / LangGraph Agent Server (``langgraph.json`` names them by module path).

Built from the settings at import through :meth:`~parallelsearch.settings.Settings.graph_parts`, as
the CLI and the server build theirs, with the stores opened at the first search: the import stays
under the Agent Server's slow-import warning, and Chroma, torch and the encoder load in a worker
thread when a run first searches (benchmarks/langgraph_import.py). No checkpointer: the server
brings its own (docs/architecture.md, "Threads"). Served, so the planner's history is bounded
as ``parallelsearch serve`` bounds it (``Settings.served``: ``server_max_history_messages``).
"""

from __future__ import annotations

from parallelsearch.settings import get_settings

_parts = get_settings().served().graph_parts(["parallel", "sequential", "rag", "dag"], defer_stores=True)
graph = _parts.graph("parallel")
sequential = _parts.graph("sequential")
rag = _parts.graph("rag")
dag = _parts.graph("dag")
