"""Agents: the ParallelSearch protocol, policies (text generation backends) and searchers.

Internal: the building blocks behind the public API in ``parallelsearch`` (docs/api.md); names here may change without notice.
"""

from parallelsearch.agents.protocol import (
    INVALID_FEEDBACK,
    STOP_STRINGS,
    TEMPLATES,
    Action,
    format_observation,
    parse_action,
    render_prompt,
)

__all__ = [
    "INVALID_FEEDBACK",
    "STOP_STRINGS",
    "TEMPLATES",
    "Action",
    "format_observation",
    "parse_action",
    "render_prompt",
]
