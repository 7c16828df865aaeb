"""The one async protocol every policy backend implements: generate one turn."""

from __future__ import annotations

from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from parallelsearch.agents.protocol import DEFAULT_MAX_STAGES, STOP_STRINGS, protocol_regex

#: True while a graph runs a sync call (``invoke``/``stream``/``batch``) on a background loop: a
#: backend whose async client is bound to the loop that first used it then takes its sync path.
SYNC_RUN: ContextVar[bool] = ContextVar("parallelsearch_sync_run", default=False)


@dataclass
class TurnRequest:
    """Everything a backend may need to produce one policy turn: the text so far (``transcript``;
    ``segments`` as ``(role, text)`` pairs for chat models; ``token_ids`` when training keeps
    them), and under the tools protocol the episode as LangChain ``messages``."""

    transcript: str
    segments: list[tuple[str, str]] = field(default_factory=list)
    token_ids: list[int] | None = None
    stop: tuple[str, ...] = STOP_STRINGS
    max_tokens: int = 500
    temperature: float = 0.0
    top_p: float = 1.0
    logprobs: bool = False
    turn_index: int = 0
    final: bool = False
    allow_split: bool = True
    #: the graph's prompt teaches ``#k`` (the ``dag`` graph): a search may name earlier sub-queries
    references: bool = False
    max_subqueries: int = 8
    max_stages: int = DEFAULT_MAX_STAGES
    question: str = ""
    metadata: dict[str, Any] = field(default_factory=dict)
    role: str = "planner"
    messages: list[Any] | None = None


@dataclass
class TurnResult:
    text: str
    token_ids: list[int] | None = None
    logprobs: list[float] | None = None
    finish_reason: str | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    labels: tuple[str, ...] = ()
    #: the tools protocol's reply: the AI message itself, its parsed and its unparsable tool calls
    message: Any = None
    tool_calls: list[dict[str, Any]] | None = None
    invalid_tool_calls: list[dict[str, Any]] = field(default_factory=list)


@runtime_checkable
class Policy(Protocol):
    """One policy turn from a :class:`TurnRequest`. A LangChain chat model passes this check too
    (its ``agenerate`` means something else): take policies through ``coerce.as_policy``."""

    name: str

    async def agenerate(self, request: TurnRequest) -> TurnResult: ...


def request_regex(request: TurnRequest, think_chars: int) -> str:
    """The grammar of the turn ``request`` asks for, for a backend that decodes constrained."""
    return protocol_regex(
        final=request.final,
        split=request.allow_split,
        max_subqueries=request.max_subqueries,
        max_stages=request.max_stages,
        think_chars=think_chars,
    )


def close_unfinished_tag(text: str, stops: tuple[str, ...]) -> str:
    """Chat APIs drop the stop string; put it back so the turn ends as the protocol says."""
    for stop in stops:
        opener = stop.replace("</", "<")
        if text.rstrip().endswith(stop):
            return text
        if opener in text and stop not in text[text.rfind(opener) :]:
            return text + stop
    return text
