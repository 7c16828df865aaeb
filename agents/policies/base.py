"""The one async protocol every policy backend implements: generate one turn."""

from __future__ import annotations

from contextvars import ContextVar
from typing import Protocol, runtime_checkable

from parallelsearch.agents.protocol import TurnRequest, TurnResult, get_protocol

#: True while a graph runs a sync call (``invoke``/``stream``/``batch``) on a background loop: a
#: backend whose async client is bound to the loop that first used it then takes its sync path.
SYNC_RUN: ContextVar[bool] = ContextVar("parallelsearch_sync_run", default=False)


@runtime_checkable
class Policy(Protocol):
    """One policy turn from a :class:`TurnRequest`. A LangChain chat model passes this check too
    (its ``agenerate`` means something else): take policies through ``coerce.as_policy``. A policy
    that can answer with tool calls says so with a true ``calls_tools`` attribute."""

    name: str

    async def agenerate(self, request: TurnRequest) -> TurnResult: ...


def calls_tools(policy: object) -> bool:
    """Whether ``policy`` can answer a request's ``tools`` with tool calls (a chat model with
    ``bind_tools``); a policy that says nothing writes text."""
    return bool(getattr(policy, "calls_tools", False))


def request_regex(request: TurnRequest, think_chars: int) -> str:
    """The grammar of the turn ``request`` asks for, for a backend that decodes constrained."""
    return get_protocol(request.protocol).grammar(
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
