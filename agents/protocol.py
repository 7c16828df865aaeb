"""The ParallelSearch protocol (docs/architecture.md, "The protocol"): prompts, action parsers,
observation formatter, feedback. The parsers never raise: they report why an action is invalid.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Literal, get_args

from parallelsearch.stores.errors import check_choice
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

#: The paper's Table 1 template (its wording is not available offline; it describes the official
#: code's instructions, so this is that text with the typo fixed).
PAPER_TEMPLATE = OFFICIAL_TEMPLATE.replace("as many times as your want", "as many times as you want")

#: Search-R1's prompt (one query per search; used by the sequential baseline): the official one
#: without its sentences on decomposing.
SEARCH_R1_TEMPLATE = OFFICIAL_TEMPLATE.replace(
    "If the original query is complex or involves multiple parts, you are encouraged to decompose it into "
    "smaller sub-questions, separated by ##. "
    "For example: <search> sub-question 1 ## sub-question 2 </search>. ",
    "",
)

#: The ``dag`` graph's prompt: the paper's plus one sentence teaching ``#k``, so a dependent chain
#: costs one turn, not one per hop.
DAG_TEMPLATE = PAPER_TEMPLATE.replace(
    "sub-question 2 </search>. ",
    "sub-question 2 </search>. If a sub-question needs the answer of an earlier one, refer to that answer "
    "as #k, where k is the earlier sub-question's position in the same search (#1 is the first); it is "
    "searched once #k is known. For example: <search> county of Van Hook Township ## seat of #1 </search>. ",
    1,
)

TEMPLATES = {
    "paper": PAPER_TEMPLATE,
    "official": OFFICIAL_TEMPLATE,
    "search_r1": SEARCH_R1_TEMPLATE,
    "dag": DAG_TEMPLATE,
}

#: The tools protocol's prompt: the same instructions for a chat model that calls a ``search`` tool.
TOOLS_TEMPLATE = (
    "Answer the given question. Think first every time you get new information. If you lack some "
    "knowledge, call the search tool; it returns the top searched results. If the question is complex or "
    "involves multiple parts, decompose it into smaller sub-questions and call search once per sub-question "
    "in the same message: the calls run in parallel. You can search as many times as you want. If you find no "
    "further external knowledge needed, reply with the answer only, without a tool call and without detailed "
    "illustrations. For example: Beijing. Question: {question}\n"
)

#: How a policy writes a search: the paper's tags, or the tool-call protocol (native calls or their text form).
Protocol = Literal["tags", "tools"]
TEXT_PROTOCOLS: tuple[str, ...] = get_args(Protocol)


def check_protocol(protocol: object, where: str = "") -> Protocol:
    """``protocol`` if it is one of :data:`Protocol`, else a ValueError naming it (``where``: whose) and the choices."""
    return check_choice(protocol, TEXT_PROTOCOLS, "protocol", where)


SEARCH_TOOL_NAME = "search"
#: how many stages one search may take by default (MuSiQue's longest chains have four hops)
DEFAULT_MAX_STAGES = 4

#: The one tool of the tools protocol, in the OpenAI function format every ``bind_tools`` accepts.
SEARCH_TOOL: dict = {
    "type": "function",
    "function": {
        "name": SEARCH_TOOL_NAME,
        "description": (
            "Search the knowledge store for one self-contained query; returns the top passages as "
            "'Doc i(Title: t) text' lines. Call it several times in one message for independent sub-questions."
        ),
        "parameters": {
            "type": "object",
            "properties": {"query": {"type": "string", "description": "one self-contained search query"}},
            "required": ["query"],
        },
    },
}

#: The tools protocol's TEXT form, for training a policy that writes text (the Hermes/Qwen form
#: vLLM's ``hermes`` tool parser reads): ``<tool_call>`` JSON blocks, the answer in ``<answer>``.
TOOL_TEXT_TEMPLATE = (
    "Answer the given question. You may think first every time you get new information. If you lack some "
    "knowledge, call the search tool; it returns the top searched results in <tool_response> and "
    "</tool_response>. You are provided with the tool signature within <tools></tools>:\n<tools>\n"
    + json.dumps(SEARCH_TOOL, ensure_ascii=False)
    + "\n</tools>\nFor each call, write a JSON object with the function name and arguments within "
    '<tool_call></tool_call>: <tool_call>\n{"name": "search", "arguments": {"query": "..."}}\n</tool_call>. '
    "If the question is complex or involves multiple parts, decompose it into smaller sub-questions and write "
    "one call per sub-question in the same turn: the calls run in parallel. You can search as many times as "
    "you want. If you find no further external knowledge needed, give the answer inside <answer> and "
    "</answer>, without detailed illustrations. For example, <answer> Beijing </answer>. Question: {question}\n"
)

#: prompt templates of the tools protocol (kept apart from :data:`TEMPLATES`, the tags protocol's)
TOOL_TEMPLATES = {"tools": TOOLS_TEMPLATE, "tool_text": TOOL_TEXT_TEMPLATE}

#: The official code's corrective feedback for an invalid action (search_r1/llm_agent/generation.py).
INVALID_FEEDBACK = (
    "\nMy previous action is invalid. If I want to search, I should put the query between <search> and "
    "</search>. If I want to give the final answer, I should put the answer between <answer> and </answer>. "
    "Let me try again.\n"
)


def render_prompt(question: str, template: str = "paper", stores: Sequence[str] = ()) -> str:
    """The initial prompt. ``template`` is a name from :data:`TEMPLATES` or a format string with ``{question}``."""
    text = TEMPLATES.get(template) or TOOL_TEMPLATES.get(template, template)
    if "{question}" not in text:
        names = ", ".join([*TEMPLATES, *TOOL_TEMPLATES])
        raise ValueError(
            f"prompt template {template[:60]!r} is neither a known name ({names}) nor has {{question}}"
        )
    q, _ = scrub_text(question.strip())
    prompt = text.replace("{question}", q)
    if len(stores) > 1:  # the store hint goes before the question (or first, in a template without one)
        hint = (
            f"Available knowledge stores: {', '.join(stores)}. Write 'store: query' to search one store only; "
            "a query without a store name searches all of them. "
        )
        at = max(prompt.find("Question: "), 0)
        prompt = prompt[:at] + hint + prompt[at:]
    return prompt


@dataclass(frozen=True)
class ToolCallOutcome:
    """One tool call of a tools-protocol turn: the sub-query it searches (duplicates share one
    index) or why it is invalid. Every call gets exactly one tool message back, by ``id``."""

    id: str
    index: int | None = None
    error: str | None = None


@dataclass(frozen=True)
class Action:
    """What one policy turn asked for (``calls``: the tool calls of a tools-protocol turn)."""

    kind: Literal["search", "answer", "invalid"]
    subqueries: tuple[str, ...] = ()
    answer: str | None = None
    think: str | None = None
    reason: str | None = None
    raw_query: str | None = None
    dropped: tuple[str, ...] = field(default=())
    calls: tuple[ToolCallOutcome, ...] = field(default=())


_TAG_RE = re.compile(r"<(/?)(think|search|answer|information)>")


def truncate_at_stop(text: str, stops: Sequence[str] = STOP_STRINGS) -> str:
    """Cut ``text`` after the first stop string (kept), as vLLM does with include_stop_str_in_output."""
    ends = [text.find(s) + len(s) for s in stops if s in text]
    return text[: min(ends)] if ends else text


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
    Linear; with ``limit`` reading stops at the first distinct piece past it (enough to refuse)."""
    kept: dict[str, None] = {}
    dropped: list[str] = []
    for raw in _pieces(query):
        piece = " ".join(raw.split())
        if piece in kept:
            dropped.append(piece)
        elif piece:
            kept[piece] = None
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
            reason = "the policy wrote an <information> tag (only the environment may)"
            return Action("invalid", think=think, reason=reason)
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
            reason = (
                f"{body.count(SUBQUERY_SEPARATOR) + 1} sub-queries in one search (more than "
                f"{max_subqueries} distinct); at most {max_subqueries} are allowed"
            )
            return Action("invalid", think=think, reason=reason, raw_query=body)
        return Action("search", subqueries=subs, think=think, raw_query=body, dropped=dropped)
    if open_tag in ("search", "answer"):
        return Action("invalid", think=think, reason=f"<{open_tag}> is never closed")
    return Action("invalid", think=think, reason="no <search> or <answer> tag")


#: what a refused tool call is told (one tool message per call, like INVALID_FEEDBACK for a tag turn)
TOOL_CALL_FEEDBACK = (
    'This call is invalid: {reason}. To search, call search with {{"query": "..."}} (one query per call; '
    "several calls in one message for independent sub-questions). To answer, reply with the answer only, "
    "without a tool call. Nothing of this message was searched; try again."
)
#: what the valid calls of an invalid turn are told: nothing of the turn is searched
TOOL_CALL_NOT_RUN = "Not searched: this message is invalid ({reason}). Nothing of it was searched; try again."


def content_text(content: object) -> str:
    """A message's text: a string, or the text parts of a content-block list."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            c if isinstance(c, str) else str(c.get("text", "")) if isinstance(c, dict) else ""
            for c in content
        )
    return ""


def _call_error(call: object) -> tuple[str, str | None, str]:
    """(id, error or None, query) of one parsed tool call (LangChain's ``{name, args, id}``)."""
    if not isinstance(call, dict):
        return "", f"a tool call is {type(call).__name__}, not an object", ""
    cid = call.get("id") if isinstance(call.get("id"), str) else ""
    name = call.get("name")
    if name != SEARCH_TOOL_NAME:
        return cid, f"unknown tool {name!r} (the only tool is {SEARCH_TOOL_NAME!r})", ""
    args = call.get("args")
    query = args.get("query") if isinstance(args, dict) else None
    if not isinstance(query, str):
        shown = json.dumps(args, default=str)[:120]
        return cid, f'bad arguments {shown} (search takes {{"query": string}})', ""
    query = " ".join(query.split())
    if not query:
        return cid, "empty query", ""
    return cid, None, query


#: why a tools-protocol reply without a call that stopped at the token limit is not an answer
CUT_REPLY_REASON = (
    "the reply was cut at the token limit before it finished (no call, and its text is not an answer)"
)


def parse_tool_calls(
    tool_calls: object,
    content: object = "",
    invalid_tool_calls: object = (),
    *,
    max_subqueries: int = 8,
    split: bool = True,
    cut: bool = False,
) -> Action:
    """Parse one tools-protocol turn (an AI message's ``tool_calls``, ``content`` and
    ``invalid_tool_calls``) into the same :class:`Action` the tag parser returns. Never raises.
    The rules: docs/architecture.md, "The tools protocol"."""
    try:
        text = content_text(content)
        calls = list(tool_calls) if isinstance(tool_calls, list | tuple) else []
        broken = list(invalid_tool_calls) if isinstance(invalid_tool_calls, list | tuple) else []
        if tool_calls is not None and not isinstance(tool_calls, list | tuple):
            return Action("invalid", reason=f"tool_calls is {type(tool_calls).__name__}, not a list")
        if not calls and not broken:
            if cut:
                return Action("invalid", reason=CUT_REPLY_REASON)
            answer = text.strip()
            if not answer:
                return Action("invalid", reason="no tool call and no answer text")
            return Action("answer", answer=answer)
        think = text.strip() or None
        outcomes: list[ToolCallOutcome] = []
        errors: list[str] = []
        subs: list[str] = []
        index: dict[str, int] = {}
        dropped: list[str] = []
        for i, call in enumerate(calls):
            cid, err, query = _call_error(call)
            cid = cid or f"call_{i}"
            if err is None:
                if query in index:
                    dropped.append(query)
                else:
                    index[query] = len(subs)
                    subs.append(query)
                outcomes.append(ToolCallOutcome(cid, index[query]))
            else:
                outcomes.append(ToolCallOutcome(cid, error=err))
                errors.append(err)
        for j, bad in enumerate(broken):
            info = bad if isinstance(bad, dict) else {}
            cid = info.get("id") if isinstance(info.get("id"), str) else f"call_{len(calls) + j}"
            why = str(info.get("error") or "")[:80]
            err = f"arguments of {info.get('name')!r} are not valid JSON ({why})"
            outcomes.append(ToolCallOutcome(cid, error=err))
            errors.append(err)
        if not errors and len(subs) > max_subqueries:
            errors.append(
                f"{len(subs)} search calls in one message (more than {max_subqueries} distinct); "
                f"at most {max_subqueries} are allowed"
            )
        if not errors and not split and len(subs) > 1:
            errors.append(f"{len(subs)} searches in one message; this graph searches one query per turn")
        raw = " ## ".join(subs)
        done = tuple(outcomes)
        if errors:
            reason = "; ".join(dict.fromkeys(errors))
            return Action("invalid", think=think, reason=reason, raw_query=raw or None, calls=done)
        return Action("search", tuple(subs), think=think, raw_query=raw, dropped=tuple(dropped), calls=done)
    except Exception as e:  # the parser never raises, whatever a chat model returned
        return Action("invalid", reason=f"unreadable tool calls ({type(e).__name__}: {e})")


def tool_feedback(action: Action) -> list[tuple[str, str]]:
    """(tool_call_id, text) for every call of an invalid tools-protocol turn."""
    not_run = TOOL_CALL_NOT_RUN.format(reason=action.reason or "invalid call")
    return [(c.id, TOOL_CALL_FEEDBACK.format(reason=c.error) if c.error else not_run) for c in action.calls]


def render_tool_calls(content: str, calls: Sequence[dict]) -> str:
    """A tools-protocol turn as text for the readable transcript (the Hermes/Qwen form): its
    text, then one ``<tool_call>`` block per call."""
    blocks = "".join(
        "<tool_call>\n"
        + json.dumps({"name": c.get("name"), "arguments": c.get("args")}, ensure_ascii=False, default=str)
        + "\n</tool_call>"
        for c in calls
        if isinstance(c, dict)
    )
    return (content + "\n" if content and blocks else content) + blocks


def format_tool_response(text: str) -> str:
    """One tool message as text (the Hermes/Qwen form) for the readable transcript."""
    return f"\n<tool_response>\n{text.strip()}\n</tool_response>"


#: Where an assistant turn ends in the Hermes/Qwen (ChatML) chat template: a text-form turn stops
#: here, not at ``</tool_call>``, since only the end of the turn says its last parallel call is written.
TOOL_TURN_END = "<|im_end|>"
#: the text form's stop strings: the end of a tool turn, or of the answer
TOOL_STOP_STRINGS: tuple[str, ...] = (TOOL_TURN_END, "</answer>")
#: what a text-form turn with neither a tool call nor an answer is told
TOOL_TEXT_RETRY = (
    'My previous turn is invalid: {reason}. To search, write <tool_call>{{"name": "search", "arguments": '
    '{{"query": "..."}}}}</tool_call> (one block per sub-question); to answer, write <answer> ... </answer>.'
)

_TOOL_BLOCK_RE = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)
_ENV_TAG_RE = re.compile(r"</?(tool_response|information)>")
_TEXT_ANSWER_RE = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)


def tool_text_observation(responses: Sequence[str], turn_closed: bool = True, note: str = "") -> str:
    """The environment's reply to a text-form turn as the Hermes/Qwen template writes tool messages
    (``<tool_response>`` blocks or a ``note``), closing a turn cut before :data:`TOOL_TURN_END`."""
    head = "" if turn_closed else TOOL_TURN_END
    body = "".join(format_tool_response(r) for r in responses) + (f"\n{note}" if note else "")
    return f"{head}\n<|im_start|>user{body}{TOOL_TURN_END}\n<|im_start|>assistant\n"


def _text_call(body: str, i: int) -> dict:
    """One ``<tool_call>`` block's JSON as a LangChain-style call (an invalid call has ``error``)."""
    cid = f"call_{i}"
    try:
        obj = json.loads(body)
    except ValueError as e:
        return {"id": cid, "name": "<tool_call>", "args": body.strip()[:120], "error": str(e)}
    if not isinstance(obj, dict):
        return {"id": cid, "name": None, "args": obj}
    args = obj.get("arguments", obj.get("parameters"))
    if isinstance(args, str):  # some models write the arguments as a JSON string, as OpenAI sends them
        try:
            args = json.loads(args)
        except ValueError as e:
            return {"id": cid, "name": obj.get("name"), "args": args[:120], "error": str(e)}
    return {"id": cid, "name": obj.get("name"), "args": args}


def parse_tool_text(text: object, *, max_subqueries: int = 8, split: bool = True) -> Action:
    """Parse one turn of the tools protocol's text form (``<tool_call>`` blocks, ids ``call_0``...
    in order, or an ``<answer>``) into the same :class:`Action` as :func:`parse_tool_calls`."""
    try:
        if not isinstance(text, str):
            return Action("invalid", reason=f"turn is {type(text).__name__}, not text")
        env_tag = _ENV_TAG_RE.search(text)
        if env_tag:
            return Action(
                "invalid", reason=f"the policy wrote a <{env_tag.group(1)}> tag (only the environment may)"
            )
        blocks = list(_TOOL_BLOCK_RE.finditer(text))
        rest = _TOOL_BLOCK_RE.sub("", text)
        if "<tool_call>" in rest or "</tool_call>" in rest:
            return Action("invalid", reason="a <tool_call> is never closed (or closed without opening)")
        if not blocks:
            answers = _TEXT_ANSWER_RE.findall(text)
            if not answers:
                return Action("invalid", reason="no <tool_call> and no <answer>")
            if not answers[-1].strip():
                return Action("invalid", reason="empty <answer>")
            return parse_tool_calls([], answers[-1])
        if _TEXT_ANSWER_RE.search(rest):
            return Action("invalid", reason="an <answer> beside tool calls (answer in a turn without calls)")
        read = [_text_call(m.group(1), i) for i, m in enumerate(blocks)]
        broken = [c for c in read if "error" in c]
        calls = [c for c in read if "error" not in c]
        action = parse_tool_calls(
            calls, text[: blocks[0].start()], broken, max_subqueries=max_subqueries, split=split
        )
        if broken:  # keep the calls in the order they were written (one response each, in order)
            order = {f"call_{i}": i for i in range(len(blocks))}
            action = replace(action, calls=tuple(sorted(action.calls, key=lambda c: order.get(c.id, 0))))
        return action
    except Exception as e:  # the parser never raises, whatever the policy wrote
        return Action("invalid", reason=f"unreadable turn ({type(e).__name__}: {e})")


def searched_as_line(text: str) -> str:
    """The line that shows what a dependent sub-query was searched with, once its ``#k`` was
    resolved: the policy reads which name the environment put in, in both protocols."""
    return f"Searched as: {' '.join(text.split())}\n"


#: how ``Doc i(Title: t)`` shows a title: ``official`` = the corpus entry's first line verbatim, quotes
#: kept (``Title: "Aaron"``), as released checkpoints saw it; ``stripped`` = the bare title
TitleStyle = Literal["official", "stripped"]
TITLE_STYLES: tuple[str, ...] = get_args(TitleStyle)


def format_passages(passages: Sequence[Passage], titles: TitleStyle = "stripped") -> str:
    """One sub-query's results: ``Doc i(Title: t) text`` lines, numbering from 1."""
    return "".join(
        f"Doc {i}(Title: {p.first_line if titles == 'official' else p.title}) {p.text}\n"
        for i, p in enumerate(passages, 1)
    )


def format_observation(
    results: Sequence[Sequence[Passage] | None],
    errors: Sequence[str | None] = (),
    queries: Sequence[str] = (),
    max_words: int | None = None,
    titles: TitleStyle = "stripped",
    searched_as: Sequence[str | None] = (),
) -> str:
    """ONE ``<information>`` block for a search round, sub-queries in order; a failed one shows a
    notice, a dependent one what it was searched as. ``max_words``: a whitespace token cap."""
    check_choice(titles, TITLE_STYLES, "title style")
    parts = []
    for i, res in enumerate(results):
        err = errors[i] if i < len(errors) else None
        shown = searched_as[i] if i < len(searched_as) else None
        if shown is not None:
            parts.append(searched_as_line(shown))
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


# Every character str.strip() removes, spelled out: "\s" means another set to xgrammar (no
# \x1c-\x1f), so an engine could end an answer on a character the parser then strips away.
_SPACE = "".join(f"\\u{i:04x}" for i in range(0x3001) if chr(i).isspace())


def _subquery_regex(earlier: int, chars: int, bad: str) -> str:
    """One sub-query (``bad`` characters never) starting and ending with a non-space, of at most
    ``chars`` characters, or three times that when it names earlier results as ``#1`` ..
    ``#earlier``: a reference is never followed by a digit, so none reads as one nobody made."""
    q = max(chars - 2, 0)
    edge, mid = rf"[^{bad}{_SPACE}]", rf"[^{bad}]"
    if earlier == 0:
        return rf"{edge}({mid}{{0,{q}}}{edge})?"
    ref = rf"#[1-{earlier}]"
    glued, glued_end = rf"{ref}[^{bad}0-9]", rf"{ref}[^{bad}0-9{_SPACE}]"
    return rf"({ref}|{edge}|{glued_end}|({edge}|{glued})({mid}|{glued}){{0,{q}}}({edge}|{glued_end}|{ref}))"


def _search_regex(n: int, max_stages: int, chars: int, bad: str, wrap: tuple[str, str], sep: str) -> str:
    """Up to ``n`` sub-queries (each ``wrap``-ped) joined by ``sep``, the k-th naming only
    ``#1`` .. ``#min(k-1, max_stages-1, 9)``: so every plan it allows fits in ``max_stages`` stages.
    Sub-queries past the last distinct one repeat it, so the size does not grow with ``n``."""
    cap = min(max_stages - 1, 9)
    parts = [wrap[0] + _subquery_regex(i, chars, bad) + wrap[1] for i in range(min(n, cap + 1))]
    more = n - len(parts)
    regex = parts[-1] + (rf"({sep}{parts[-1]}){{0,{more}}}" if more else "")
    for part in reversed(parts[:-1]):
        regex = rf"{part}({sep}{regex})?"
    return regex


def protocol_regex(
    *,
    final: bool = False,
    split: bool = True,
    max_subqueries: int = 8,
    max_stages: int = DEFAULT_MAX_STAGES,
    think_chars: int = 600,
    query_chars: int = 100,
    answer_chars: int = 100,
    protocol: Protocol = "tags",
) -> str:
    """A regular expression of one valid turn (think, then a search or an answer; the final turn
    only answers), for constrained decoding. Every part is bounded, so even a model that never saw
    the protocol ends its turn with a valid action instead of running to the token cap; a search
    names only earlier sub-queries with ``#k``, within ``max_stages``: the plan refuses none of it.
    The tools text form ends after its last ``<tool_call>`` block, so the engine ends the turn with
    its end-of-turn token (:data:`TOOL_TURN_END` for ChatML models)."""
    if max_subqueries < 1 or max_stages < 1:
        raise ValueError(f"max_subqueries and max_stages must be >= 1, got {max_subqueries}, {max_stages}")
    check_protocol(protocol)
    think = rf"<think>[^<]{{1,{think_chars}}}</think>\n"
    answer = rf"<answer> [^<{_SPACE}]([^<\n]{{0,{max(answer_chars - 2, 0)}}}[^<{_SPACE}])? </answer>"
    if final:
        return think + answer
    n = max_subqueries if split else 1
    if protocol == "tools":
        call = (r'<tool_call>\n\{"name": "search", "arguments": \{"query": "', r'"\}\}\n</tool_call>')
        searches = _search_regex(n, max_stages, query_chars, r'"\\<\x00-\x1f#', call, r"\n")
        return think + rf"({searches}|{answer})"
    parts = _search_regex(n, max_stages, query_chars, r"<#\n", ("", ""), " ## ")
    return think + rf"(<search> {parts} </search>|{answer})"
