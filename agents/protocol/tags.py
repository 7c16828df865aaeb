"""The paper's protocol: ``<think>``, ``<search> a ## b </search>`` or ``<answer>``, and ONE
``<information>`` block per search, byte for byte as the official code writes it."""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Sequence

from parallelsearch.agents.protocol.action import SUBQUERY_SEPARATOR, Action, split_subqueries
from parallelsearch.agents.protocol.base import Calls, Limits, Results, SearchProtocol, WrittenTurn
from parallelsearch.agents.protocol.grammar import tag_search_regex
from parallelsearch.agents.protocol.observation import (
    DEFAULT_STYLE,
    Observation,
    ObservationStyle,
    cap_words,
    failure_line,
    format_passages,
    searched_as_line,
)
from parallelsearch.agents.protocol.turn import TurnResult
from parallelsearch.stores.passages import Passage
from parallelsearch.stores.text import scrub_text

log = logging.getLogger(__name__)

#: The official code's corrective feedback for an invalid action (search_r1/llm_agent/generation.py).
INVALID_FEEDBACK = (
    "\nMy previous action is invalid. If I want to search, I should put the query between <search> and "
    "</search>. If I want to give the final answer, I should put the answer between <answer> and </answer>. "
    "Let me try again.\n"
)

_TAG_RE = re.compile(r"<(/?)(think|search|answer|information)>")
_SEQUENCE_TAG_RE = re.compile(r"(</?(?:think|search|information|answer)>)")
#: where a text protocol's prompt ends: a chat template's assistant marker, else the question line
PROMPT_END_MARKERS = (
    re.compile(r"<\|im_start\|>assistant\s*"),
    re.compile(r"<\|start_header_id\|>assistant<\|end_header_id\|>\s*"),
    re.compile(r"Question:[^\n]*\n"),
)
_SEPARATOR_RE = re.compile(
    r"\s*<information>.*?</information>\s*|"
    + re.escape(INVALID_FEEDBACK)
    + "|"
    + re.escape(INVALID_FEEDBACK.strip()),
    re.DOTALL,
)


def _closed_tag(tag: str, body: str, think: str | None, limits: Limits) -> Action:
    """The action a closed ``<answer>`` or ``<search>`` body asks for."""
    if tag == "answer":
        answer = body.strip()
        if not answer:
            return Action("invalid", think=think, reason="empty <answer>")
        return Action("answer", answer=answer, think=think)
    if limits.split:
        subs, dropped = split_subqueries(body, limit=limits.max_subqueries)
    else:
        q = " ".join(body.split())
        subs, dropped = ((q,) if q else ()), ()
    if not subs:
        return Action("invalid", think=think, reason="empty <search>", raw_query=body)
    if len(subs) > limits.max_subqueries:
        reason = (
            f"{body.count(SUBQUERY_SEPARATOR) + 1} sub-queries in one search (more than "
            f"{limits.max_subqueries} distinct); at most {limits.max_subqueries} are allowed"
        )
        return Action("invalid", think=think, reason=reason, raw_query=body)
    return Action("search", subqueries=subs, think=think, raw_query=body, dropped=dropped)


def parse_action(text: object, *, max_subqueries: int = 8, split: bool = True) -> Action:
    """Parse one policy turn. Never raises, whatever ``text`` is."""
    if not isinstance(text, str):
        return Action("invalid", reason=f"turn is {type(text).__name__}, not text")
    think = None
    open_tag: str | None = None
    open_end = 0
    for m in _TAG_RE.finditer(text):
        closing, tag = m.group(1) == "/", m.group(2)
        if tag == "think":
            if not closing:
                open_tag, open_end = "think", m.end()
            elif open_tag == "think":
                think = text[open_end : m.start()].strip()
                open_tag = None
            continue
        if tag == "information":
            reason = "the policy wrote an <information> tag (only the environment may)"
            return Action("invalid", think=think, reason=reason)
        if not closing:
            if open_tag in ("search", "answer"):
                return Action("invalid", think=think, reason=f"<{tag}> opened inside <{open_tag}>")
            open_tag, open_end = tag, m.end()
            continue
        if open_tag != tag:
            return Action("invalid", think=think, reason=f"</{tag}> without a matching <{tag}>")
        return _closed_tag(tag, text[open_end : m.start()], think, Limits(max_subqueries, split))
    if open_tag in ("search", "answer"):
        return Action("invalid", think=think, reason=f"<{open_tag}> is never closed")
    return Action("invalid", think=think, reason="no <search> or <answer> tag")


def format_observation(
    results: Sequence[Sequence[Passage] | None],
    errors: Sequence[str | None] = (),
    queries: Sequence[str] = (),
    searched_as: Sequence[str | None] = (),
    *,
    style: ObservationStyle = DEFAULT_STYLE,
) -> str:
    """ONE ``<information>`` block for a search round, sub-queries in order; a failed one shows a
    notice, a dependent one what it was searched as; shown as ``style`` says."""
    parts = []
    for i, res in enumerate(results):
        err = errors[i] if i < len(errors) else None
        shown = searched_as[i] if i < len(searched_as) else None
        if shown is not None:
            parts.append(searched_as_line(shown))
        if err:
            q = queries[i] if i < len(queries) else f"#{i + 1}"
            parts.append(failure_line(q, err) + "\n")
        else:
            parts.append(format_passages(res or [], style))
    body, replaced = scrub_text("".join(parts).strip())
    if replaced:
        log.warning(
            "replaced %d invalid character(s) (lone surrogates) in an observation with U+FFFD", replaced
        )
    return f"\n\n<information>{cap_words(body, style)}</information>\n\n"


#: the official format check's state machine: (tag, state) -> next state
_TRANSITIONS = {
    ("<think>", "start"): "in_think",
    ("<think>", "information"): "in_think",
    ("</think>", "in_think"): "after_think",
    ("<search>", "after_think"): "in_search",
    ("</search>", "in_search"): "after_search",
    ("<information>", "after_search"): "in_information",
    ("</information>", "in_information"): "information",
    ("<answer>", "after_think"): "in_answer",
    ("</answer>", "in_answer"): "end",
}


def tag_sequence_problem(content: str, ends: tuple[str, ...] = ("end",)) -> str | None:
    """The official format check: think -> (search -> information -> think)* -> answer, nothing
    outside tags; ``ends`` are the states the text may end in. None when it holds, else why not."""
    for tag in ("think", "search", "information", "answer"):
        opened, closed = content.count(f"<{tag}>"), content.count(f"</{tag}>")
        if opened != closed:
            return f"unbalanced <{tag}>: {opened} opening vs {closed} closing"
    state = "start"
    for part in _SEQUENCE_TAG_RE.split(content):
        if not part.strip():
            continue
        if _SEQUENCE_TAG_RE.fullmatch(part):
            nxt = _TRANSITIONS.get((part, state))
            if nxt is None:
                return f"unexpected {part} in state {state}"
            state = nxt
        elif state not in ("in_think", "in_search", "in_information", "in_answer"):
            return f"text outside tags in state {state}: {part.strip()[:40]!r}"
    return None if state in ends else f"incomplete: ended in state {state}"


def response_start(text: str, prompt: str | None, markers: Sequence[re.Pattern[str]]) -> int:
    """Where the policy's first turn begins: after ``prompt``, else after the first of ``markers``
    found (a chat assistant marker, or the question line)."""
    if prompt and text.startswith(prompt):
        return len(prompt)
    for marker in markers:
        m = marker.search(text)
        if m:
            return m.end()
    return 0


def split_turns(
    body: str, replies: re.Pattern[str], is_correction: Callable[[str], bool]
) -> list[WrittenTurn]:
    """``body`` (the policy's side of a transcript) cut at each environment reply ``replies``
    matches: the text before each reply is a turn, corrected when ``is_correction(reply)``."""
    turns: list[WrittenTurn] = []
    start = 0
    for m in replies.finditer(body):
        turns.append(WrittenTurn(body[start : m.start()], is_correction(m.group(0))))
        start = m.end()
    if body[start:].strip() or not turns:
        turns.append(WrittenTurn(body[start:]))
    return turns


class Tags(SearchProtocol):
    """The paper's text protocol (the default)."""

    name = "tags"
    default_template = "paper"

    def parse(self, result: TurnResult, limits: Limits) -> Action:
        return parse_action(result.text, max_subqueries=limits.max_subqueries, split=limits.split)

    def feedback(self, result: TurnResult, action: Action) -> Observation:
        return Observation(text=INVALID_FEEDBACK)

    def render(self, results: Results, calls: Calls, style: ObservationStyle, turn_text: str) -> Observation:
        text = format_observation(
            [r.passages for r in results],
            [r.error for r in results],
            [r.query for r in results],
            [r.searched_as for r in results],
            style=style,
        )
        return Observation(text=text)

    def search_grammar(self, n: int, max_stages: int, query_chars: int) -> str:
        return tag_search_regex(n, max_stages, query_chars)

    def format_problem(self, text: str, action: Action) -> str | None:
        return tag_sequence_problem(text, ("after_search",) if action.kind == "search" else ("end",))

    def read_turns(self, text: str, prompt: str | None = None) -> list[WrittenTurn]:
        body = text[response_start(text, prompt, PROMPT_END_MARKERS) :]
        return split_turns(body, _SEPARATOR_RE, lambda reply: "<information>" not in reply)
