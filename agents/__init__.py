"""Agents: the ParallelSearch protocol, policies (text generation backends) and searchers."""

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
