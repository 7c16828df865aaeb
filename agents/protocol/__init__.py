"""The protocols a policy speaks (docs/architecture.md, "The protocol"), one object each, and
their registry: ``tags`` (the paper's text), ``tools`` (a chat model's tool calls) and
``tool_text`` (the tool calls written as text, for training). Importing this package imports
neither LangChain, LangGraph, Chroma nor torch. It exports what other packages import from it;
the rest is imported from its modules.
"""

from __future__ import annotations

from parallelsearch.agents.protocol.action import (
    SUBQUERY_SEPARATOR,
    Action,
    content_text,
    split_subqueries,
    truncate_at_stop,
)
from parallelsearch.agents.protocol.base import Limits, SearchProtocol
from parallelsearch.agents.protocol.observation import (
    Observation,
    ObservationStyle,
    SubqueryResult,
    TitleStyle,
    format_passages,
)
from parallelsearch.agents.protocol.tags import INVALID_FEEDBACK, Tags, format_observation, parse_action
from parallelsearch.agents.protocol.templates import (
    OFFICIAL_TEMPLATE,
    SEARCH_TOOL,
    SEARCH_TOOL_NAME,
    TEMPLATES,
    TOOL_TEMPLATES,
    TOOL_TEXT_TEMPLATE,
    render_prompt,
)
from parallelsearch.agents.protocol.tool_text import (
    TOOL_STOP_STRINGS,
    TOOL_TEXT_RETRY,
    TOOL_TURN_END,
    ToolText,
    parse_tool_text,
    read_tool_call_blocks,
    server_reads_calls,
    tool_text_observation,
)
from parallelsearch.agents.protocol.tools import (
    CUT_REPLY_REASON,
    TOOL_CALL_FEEDBACK,
    TOOL_CALL_NOT_RUN,
    Tools,
    format_tool_response,
    parse_tool_calls,
    tool_feedback,
)
from parallelsearch.agents.protocol.turn import DEFAULT_MAX_STAGES, STOP_STRINGS, TurnRequest, TurnResult
from parallelsearch.stores.errors import check_choice

#: every protocol by name: a new protocol is one module and one entry here (or ``register_protocol``)
PROTOCOLS: dict[str, type[SearchProtocol]] = {"tags": Tags, "tools": Tools, "tool_text": ToolText}


def register_protocol(cls: type[SearchProtocol]) -> type[SearchProtocol]:
    """Add ``cls`` to the registry under its ``name`` (usable as a class decorator)."""
    if not (isinstance(cls, type) and issubclass(cls, SearchProtocol)):
        raise TypeError(f"a protocol must be a SearchProtocol subclass, got {cls!r}")
    PROTOCOLS[cls.name] = cls
    return cls


def get_protocol(protocol: str | SearchProtocol) -> SearchProtocol:
    """The protocol object ``protocol`` names (an object is returned as it is)."""
    if isinstance(protocol, SearchProtocol):
        return protocol
    return PROTOCOLS[check_choice(protocol, tuple(PROTOCOLS), "protocol")]()


def protocol_regex(*, protocol: str = "tags", **limits: object) -> str:
    """The constrained-decoding grammar of one turn of ``protocol`` (see ``SearchProtocol.grammar``)."""
    return get_protocol(protocol).grammar(**limits)


__all__ = [
    "CUT_REPLY_REASON",
    "DEFAULT_MAX_STAGES",
    "INVALID_FEEDBACK",
    "OFFICIAL_TEMPLATE",
    "PROTOCOLS",
    "SEARCH_TOOL",
    "SEARCH_TOOL_NAME",
    "STOP_STRINGS",
    "SUBQUERY_SEPARATOR",
    "TEMPLATES",
    "TOOL_CALL_FEEDBACK",
    "TOOL_CALL_NOT_RUN",
    "TOOL_STOP_STRINGS",
    "TOOL_TEMPLATES",
    "TOOL_TEXT_RETRY",
    "TOOL_TEXT_TEMPLATE",
    "TOOL_TURN_END",
    "Action",
    "Limits",
    "Observation",
    "ObservationStyle",
    "SearchProtocol",
    "SubqueryResult",
    "TitleStyle",
    "TurnRequest",
    "TurnResult",
    "content_text",
    "format_observation",
    "format_passages",
    "format_tool_response",
    "get_protocol",
    "parse_action",
    "parse_tool_calls",
    "parse_tool_text",
    "protocol_regex",
    "register_protocol",
    "render_prompt",
    "split_subqueries",
    "tool_feedback",
    "read_tool_call_blocks",
    "server_reads_calls",
    "tool_text_observation",
    "truncate_at_stop",
]
