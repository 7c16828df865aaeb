"""A protocol as one object: how a policy writes a search or an answer and what it reads back.

The graph's engine never branches on which protocol it runs: it asks the protocol for the prompt,
the stop strings, the parse of a turn, the turn's place in the transcript, the corrective note,
the final-turn note, the observation and the grammar. A new protocol is a subclass in one module
plus one entry in the registry (``parallelsearch.agents.protocol.PROTOCOLS``).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from parallelsearch.agents.protocol.action import Action
from parallelsearch.agents.protocol.grammar import (
    answer_regex,
    check_grammar_limits,
    think_regex,
)
from parallelsearch.agents.protocol.observation import Observation, ObservationStyle, SubqueryResult
from parallelsearch.agents.protocol.templates import TEMPLATES, TOOL_TEMPLATES, render_history, render_prompt
from parallelsearch.agents.protocol.turn import STOP_STRINGS, TurnResult

#: one search's results, in sub-query order
Results = Sequence[SubqueryResult]
#: a turn's tool call ids, each with the sub-query it searched (None: the call was refused)
Calls = Sequence[tuple[str, int | None]]


@dataclass(frozen=True)
class Limits:
    """What a turn may ask for: at most ``max_subqueries`` distinct sub-queries, split or not."""

    max_subqueries: int = 8
    split: bool = True


@dataclass(frozen=True)
class WrittenTurn:
    """One policy turn read back from a transcript, and whether the environment corrected it."""

    text: str
    corrected: bool = False


class SearchProtocol(ABC):
    """The base of every protocol (``Tags``, ``Tools``, ``ToolText``, or one of yours)."""

    #: the registry name (``GraphConfig.protocol``, the state's ``protocol``, the turn request's)
    name: ClassVar[str]
    #: the prompt template used when none is configured
    default_template: ClassVar[str]
    #: where a turn ends (kept in the turn's text)
    stop: ClassVar[tuple[str, ...]] = STOP_STRINGS
    #: the tool schemas a chat policy is bound to; a protocol with tools needs a tool-calling model
    tools: ClassVar[tuple[dict[str, Any], ...]] = ()
    #: True when the policy reads the episode as chat messages rather than as text
    chat: ClassVar[bool] = False

    def prompt(self, question: str, template: str | None = None, stores: Sequence[str] = ()) -> str:
        """The episode's first text: the template (name or format string) with the question."""
        return render_prompt(question, template or self.default_template, stores)

    def with_history(self, prompt: str, turns: Sequence[tuple[str, str]]) -> str:
        """A text protocol's prompt with the thread's earlier messages (``(role, text)`` pairs,
        ``user`` or ``assistant``) before its question; unchanged when there are none. A chat
        protocol sends them as messages instead and never calls this."""
        return render_history(prompt, turns)

    def instructions(self, template: str | None = None) -> str:
        """A chat protocol's instructions, for the system message: the template without its
        question (a chat model reads the question as the user's own message)."""
        text = TEMPLATES.get(template or "") or TOOL_TEMPLATES.get(
            template or self.default_template, template or ""
        )
        return text.split("Question: {question}")[0].split("{question}")[0].strip()

    @abstractmethod
    def parse(self, result: TurnResult, limits: Limits) -> Action:
        """The action of one turn. Never raises, whatever the policy wrote."""

    def written(self, result: TurnResult) -> Observation:
        """The turn as the transcript keeps it (and, for a chat protocol, the AI message)."""
        return Observation(text=result.text if isinstance(result.text, str) else "")

    @abstractmethod
    def feedback(self, result: TurnResult, action: Action) -> Observation:
        """The corrective note an invalid turn gets (it costs a turn)."""

    def final_note(self) -> Observation | None:
        """What the final, answer-only turn is told first (None: nothing)."""
        return None

    @abstractmethod
    def render(self, results: Results, calls: Calls, style: ObservationStyle, turn_text: str) -> Observation:
        """The observation of one search: ``results`` in sub-query order; ``calls`` the turn's tool
        call ids with the sub-query each searched; ``turn_text`` the turn it answers."""

    def grammar(
        self,
        *,
        final: bool = False,
        split: bool = True,
        max_subqueries: int = 8,
        max_stages: int = 4,
        think_chars: int = 600,
        query_chars: int = 100,
        answer_chars: int = 100,
    ) -> str:
        """A regular expression of one valid turn (think, then a search or an answer; the final
        turn only answers), for constrained decoding."""
        check_grammar_limits(max_subqueries, max_stages)
        answer = answer_regex(answer_chars)
        if final:
            return think_regex(think_chars) + answer
        search = self.search_grammar(max_subqueries if split else 1, max_stages, query_chars)
        return think_regex(think_chars) + rf"({search}|{answer})"

    def search_grammar(self, n: int, max_stages: int, query_chars: int) -> str:
        """The grammar of a search of up to ``n`` sub-queries (a protocol without one raises)."""
        raise ValueError(f"the {self.name} protocol has no grammar for constrained decoding")

    def format_problem(self, text: str, action: Action) -> str | None:
        """Why a valid turn breaks the protocol's strict format (the paper reward's format part),
        or None. Only the action is checked by default."""
        return None

    def read_turns(self, text: str, prompt: str | None = None) -> list[WrittenTurn]:
        """The policy's turns of a decoded episode (to score a transcript made elsewhere)."""
        raise ValueError(f"the {self.name} protocol cannot read its turns back from text")
