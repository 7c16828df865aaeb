"""The ParallelSearch text protocol: prompt, action parser, observation formatter, feedback.

Contract (docs/architecture.md, "The protocol"): the policy writes ``<think>``, ``<search> a ## b </search>``
or ``<answer> x </answer>``; the environment answers a search with ONE
``<information>`` block holding, per sub-query in order, its passages as
``Doc i(Title: t) text`` lines (numbering restarts per sub-query, as in the official
code). The parser never raises: it reports what it found or why the action is invalid.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Literal

from parallelsearch.stores.passages import Passage
from parallelsearch.stores.text import scrub_text

log = logging.getLogger(__name__)

STOP_STRINGS: tuple[str, ...] = ("</search>", "</answer>")
SUBQUERY_SEPARATOR = "##"

#: The official ParallelSearch code's prompt (scripts/data_process/qa_search_train_merge.py),
#: which released checkpoints were trained on.
OFFICIAL_TEMPLATE = (
    "Answer the given question. You must conduct reasoning inside <think> and </think> first every time you "
    "get new information. After reasoning, if you find you lack some knowledge, you can call a search engine by "
    "<search> query </search> and it will return the top searched results between <information> and "
    "</information>. If the original query is complex or involves multiple parts, you are encouraged to "
    "decompose it into smaller sub-questions, separated by ##. For example: <search> sub-question 1 ## "
    "sub-question 2 </search>. You can search as many times as your want. If you find no further external "
    "knowledge needed, you can directly provide the answer inside <answer> and </answer>, without detailed "
    "illustrations. For example, <answer> Beijing </answer>. Question: {question}\n"
)

#: The paper's Table 1 template. The paper's wording is not available offline here; it
#: describes the same instructions as the official code, so this mirrors that text with
#: the typo fixed. Select ``official`` for the exact training prompt of released checkpoints.
PAPER_TEMPLATE = OFFICIAL_TEMPLATE.replace("as many times as your want", "as many times as you want")

#: Search-R1's prompt (one query per search; used by the sequential baseline).
SEARCH_R1_TEMPLATE = (
    "Answer the given question. You must conduct reasoning inside <think> and </think> first every time you "
    "get new information. After reasoning, if you find you lack some knowledge, you can call a search engine by "
    "<search> query </search> and it will return the top searched results between <information> and "
    "</information>. You can search as many times as your want. If you find no further external knowledge "
    "needed, you can directly provide the answer inside <answer> and </answer>, without detailed illustrations. "
    "For example, <answer> Beijing </answer>. Question: {question}\n"
)

TEMPLATES = {"paper": PAPER_TEMPLATE, "official": OFFICIAL_TEMPLATE, "search_r1": SEARCH_R1_TEMPLATE}

#: The official code's corrective feedback for an invalid action (search_r1/llm_agent/generation.py).
INVALID_FEEDBACK = (
    "\nMy previous action is invalid. If I want to search, I should put the query between <search> and "
    "</search>. If I want to give the final answer, I should put the answer between <answer> and </answer>. "
    "Let me try again.\n"
)


def render_prompt(question: str, template: str = "paper", stores: Sequence[str] = ()) -> str:
    """The initial prompt. ``template`` is a name from :data:`TEMPLATES` or a format string with ``{question}``."""
    text = TEMPLATES.get(template, template)
    if "{question}" not in text:
        raise ValueError(
            f"prompt template {template[:60]!r} is neither a known name ({', '.join(TEMPLATES)}) nor has {{question}}"
        )
    q, _ = scrub_text(question.strip())
    prompt = text.replace("{question}", q)
    if len(stores) > 1:
        listing = ", ".join(stores)
        hint = (
            f"Available knowledge stores: {listing}. Write 'store: query' to search one store only; "
            "a query without a store name searches all of them. "
        )
        prompt = (
            prompt.replace("Question: ", hint + "Question: ", 1) if "Question: " in prompt else hint + prompt
        )
    return prompt


@dataclass(frozen=True)
class Action:
    """What one policy turn asked for."""

    kind: Literal["search", "answer", "invalid"]
    subqueries: tuple[str, ...] = ()
    answer: str | None = None
    think: str | None = None
    reason: str | None = None
    raw_query: str | None = None
    dropped: tuple[str, ...] = field(default=())


_TAG_RE = re.compile(r"<(/?)(think|search|answer|information)>")


def truncate_at_stop(text: str, stops: Sequence[str] = STOP_STRINGS) -> str:
    """Cut ``text`` after the first stop string (kept), as vLLM does with include_stop_str_in_output."""
    cut = None
    for s in stops:
        i = text.find(s)
        if i != -1 and (cut is None or i + len(s) < cut):
            cut = i + len(s)
    return text if cut is None else text[:cut]


def _pieces(query: str) -> Iterator[str]:
    """The ``##``-separated pieces of ``query``, found one at a time (no list of all of them)."""
    start = 0
    sep = len(SUBQUERY_SEPARATOR)
    while True:
        end = query.find(SUBQUERY_SEPARATOR, start)
        if end == -1:
            yield query[start:]
            return
        yield query[start:end]
        start = end + sep


def split_subqueries(query: str, limit: int | None = None) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """``a ## b ## a ##`` -> (("a", "b"), ("a",)): stripped, empties dropped, duplicates kept once.

    Linear in ``query`` (duplicates are found with a set). With ``limit``, reading stops at
    the first distinct piece past it: the result then holds ``limit + 1`` sub-queries, which is
    all a caller needs to refuse the action, and no later piece costs any work.
    """
    kept: list[str] = []
    seen: set[str] = set()
    dropped: list[str] = []
    for raw in _pieces(query):
        piece = " ".join(raw.split())
        if not piece:
            continue
        if piece in seen:
            dropped.append(piece)
            continue
        seen.add(piece)
        kept.append(piece)
        if limit is not None and len(kept) > limit:
            break
    return tuple(kept), tuple(dropped)


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
            return Action(
                "invalid",
                think=think,
                reason="the policy wrote an <information> tag (only the environment may)",
            )
        if not closing:
            if open_tag in ("search", "answer"):
                return Action("invalid", think=think, reason=f"<{tag}> opened inside <{open_tag}>")
            open_tag, open_end = tag, m.end()
            continue
        if open_tag != tag:
            return Action("invalid", think=think, reason=f"</{tag}> without a matching <{tag}>")
        body = text[open_end : m.start()]
        if tag == "answer":
            answer = body.strip()
            if not answer:
                return Action("invalid", think=think, reason="empty <answer>")
            return Action("answer", answer=answer, think=think)
        if split:
            subs, dropped = split_subqueries(body, limit=max_subqueries)
        else:
            q = " ".join(body.split())
            subs, dropped = ((q,) if q else ()), ()
        if not subs:
            return Action("invalid", think=think, reason="empty <search>", raw_query=body)
        if len(subs) > max_subqueries:
            return Action(
                "invalid",
                think=think,
                reason=f"{body.count(SUBQUERY_SEPARATOR) + 1} sub-queries in one search (more than "
                f"{max_subqueries} distinct); at most {max_subqueries} are allowed",
                raw_query=body,
            )
        return Action("search", subqueries=subs, think=think, raw_query=body, dropped=dropped)
    if open_tag in ("search", "answer"):
        return Action("invalid", think=think, reason=f"<{open_tag}> is never closed")
    return Action("invalid", think=think, reason="no <search> or <answer> tag")


TitleStyle = Literal["official", "stripped"]
#: how ``Doc i(Title: t)`` shows a title: ``official`` = the corpus entry's first line verbatim, as
#: the official code renders it (Search-R1/wiki-18 titles keep their quotes: ``Title: "Aaron"``),
#: which released checkpoints were trained on; ``stripped`` = the bare title (``Title: Aaron``)
TITLE_STYLES: tuple[str, ...] = ("official", "stripped")


def format_passages(passages: Sequence[Passage], titles: TitleStyle = "stripped") -> str:
    """One sub-query's results: ``Doc i(Title: t) text`` lines, numbering from 1."""
    if titles == "official":
        return "".join(f"Doc {i}(Title: {p.first_line}) {p.text}\n" for i, p in enumerate(passages, 1))
    return "".join(f"Doc {i}(Title: {p.title}) {p.text}\n" for i, p in enumerate(passages, 1))


def format_observation(
    results: Sequence[Sequence[Passage] | None],
    errors: Sequence[str | None] = (),
    queries: Sequence[str] = (),
    max_words: int | None = None,
    titles: TitleStyle = "stripped",
) -> str:
    """ONE ``<information>`` block for a search round, sub-queries in order.

    A failed sub-query contributes a one-line notice instead of passages, so the policy
    sees that the search happened and failed. ``max_words`` caps the block (a whitespace
    approximation of the observation token cap). ``titles``: see :data:`TitleStyle`.
    """
    if titles not in TITLE_STYLES:
        raise ValueError(f"unknown title style {titles!r}; choose one of {', '.join(TITLE_STYLES)}")
    parts = []
    for i, res in enumerate(results):
        err = errors[i] if i < len(errors) else None
        if err:
            q = queries[i] if i < len(queries) else f"#{i + 1}"
            parts.append(f"Search failed for '{q}': {err}\n")
        else:
            parts.append(format_passages(res or [], titles))
    body, replaced = scrub_text("".join(parts).strip())
    if replaced:
        log.warning(
            "replaced %d invalid character(s) (lone surrogates) in an observation with U+FFFD", replaced
        )
    if max_words is not None:
        words = body.split(" ")
        if len(words) > max_words:
            body = " ".join(words[:max_words]) + " ..."
    return f"\n\n<information>{body}</information>\n\n"


# Every character Python's str.strip() removes, spelled out: "\s" in a regular expression means
# different sets to Python and to a decoding engine's grammar compiler (xgrammar leaves out
# \x1c-\x1f, which Python strips), so an engine could end an answer on a character the parser
# then strips away.
_SPACE = "".join(f"\\u{i:04x}" for i in range(0x3001) if chr(i).isspace())


def protocol_regex(
    *,
    final: bool = False,
    split: bool = True,
    max_subqueries: int = 8,
    think_chars: int = 600,
    query_chars: int = 100,
    answer_chars: int = 100,
) -> str:
    """A regular expression of one valid policy turn, for constrained (structured) decoding.

    ``<think>...</think>``, a newline, then ``<search> q ## q </search>`` (at most
    ``max_subqueries`` parts, one when ``split`` is off) or ``<answer> a </answer>``; the
    final turn may only answer. Every part is bounded, so even a model that has never seen
    the protocol (a random one) ends its turn with a valid action instead of running to the
    token cap: the tags are the only way out of a full span. Queries and answers start and
    end with a non-space character, so the parser never sees an empty piece.
    """
    if max_subqueries < 1:
        raise ValueError(f"max_subqueries must be >= 1, got {max_subqueries}")
    think = rf"<think>[^<]{{1,{think_chars}}}</think>\n"
    word = rf"[^<#{_SPACE}]([^<#\n]{{0,{max(query_chars - 2, 0)}}}[^<#{_SPACE}])?"
    answer = rf"<answer> [^<{_SPACE}]([^<\n]{{0,{max(answer_chars - 2, 0)}}}[^<{_SPACE}])? </answer>"
    if final:
        return think + answer
    parts = rf"{word}( ## {word}){{0,{max_subqueries - 1}}}" if split and max_subqueries > 1 else word
    return think + rf"(<search> {parts} </search>|{answer})"
