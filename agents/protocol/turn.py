"""One policy turn as the engine asks for it and a backend answers it: the contract between the
graph's planner and every policy (and, across LangGraph's ``interrupt``, a trainer's engine)."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

#: the tags protocol's stop strings: a turn ends at the first ``</search>`` or ``</answer>`` (kept)
STOP_STRINGS: tuple[str, ...] = ("</search>", "</answer>")
#: how many stages one search may take by default (MuSiQue's longest chains have four hops)
DEFAULT_MAX_STAGES = 4


@dataclass
class TurnRequest:
    """Everything a backend may need to produce one turn: the text so far (``transcript``;
    ``segments`` as ``(role, text)`` pairs for chat models), under a chat protocol the episode as
    LangChain ``messages`` and the ``tools`` to bind, and when training the ``token_ids`` so far.
    ``protocol`` names the protocol (its grammar, for a backend that decodes constrained)."""

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
    protocol: str = "tags"
    tools: tuple[dict[str, Any], ...] = ()
    messages: list[Any] | None = None
    #: more options the tools are bound with (``tool_choice``, a provider's ``response_format``)
    bind_kwargs: dict[str, Any] = field(default_factory=dict)

    def to_payload(self) -> dict[str, Any]:
        """The request as plain data (an ``interrupt`` value a trainer reads), every field kept."""
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        out.update(segments=[list(s) for s in self.segments], stop=list(self.stop), tools=list(self.tools))
        return out

    @classmethod
    def from_payload(cls, payload: dict[str, Any]) -> TurnRequest:
        """The request :meth:`to_payload` wrote, whole (unknown keys are refused by name)."""
        known = {f.name for f in fields(cls)}
        extra = sorted(set(payload) - known)
        if extra:
            raise ValueError(f"a turn request payload has unknown keys {extra}")
        values = dict(payload)
        values["segments"] = [tuple(s) for s in values.get("segments") or []]
        values["stop"] = tuple(values.get("stop") or STOP_STRINGS)
        values["tools"] = tuple(values.get("tools") or ())
        return cls(**values)

    @classmethod
    def for_prompt(cls, prompt: str, *, stop: tuple[str, ...], max_tokens: int, role: str) -> TurnRequest:
        """A one-off request outside an episode (a resolver's extraction call): no turn, no protocol."""
        return cls(
            transcript=prompt, segments=[("user", prompt)], stop=stop, max_tokens=max_tokens, role=role
        )


@dataclass
class TurnResult:
    """What a backend produced: the turn's text (and, token-in/token-out, its ids and log-probs);
    under a chat protocol the AI message itself with its parsed and unparsable tool calls."""

    text: str
    token_ids: list[int] | None = None
    logprobs: list[float] | None = None
    finish_reason: str | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    labels: tuple[str, ...] = ()
    #: a chat model's reply itself (its id is the id of its streamed chunks)
    message: Any = None
    tool_calls: list[dict[str, Any]] | None = None
    invalid_tool_calls: list[dict[str, Any]] = field(default_factory=list)
