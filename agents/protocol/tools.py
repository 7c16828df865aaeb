"""A chat model's tool calls: N ``search(query)`` calls in one AI message are one search of N
sub-queries; every call gets one ``ToolMessage`` back by ``tool_call_id``; a message without
tool calls answers (docs/architecture.md, "The tools protocol")."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from parallelsearch.agents.protocol.action import Action, ToolCallOutcome, content_text
from parallelsearch.agents.protocol.base import Calls, Limits, Results, SearchProtocol
from parallelsearch.agents.protocol.observation import Observation, ObservationStyle, subquery_texts
from parallelsearch.agents.protocol.templates import SEARCH_TOOL, SEARCH_TOOL_NAME
from parallelsearch.agents.protocol.turn import TurnResult

#: what a refused tool call is told (one tool message per call, like INVALID_FEEDBACK for a tag turn)
TOOL_CALL_FEEDBACK = (
    'This call is invalid: {reason}. To search, call search with {{"query": "..."}} (one query per call; '
    "several calls in one message for independent sub-questions). To answer, reply with the answer only, "
    "without a tool call. Nothing of this message was searched; try again."
)
#: what the valid calls of an invalid turn are told: nothing of the turn is searched
TOOL_CALL_NOT_RUN = "Not searched: this message is invalid ({reason}). Nothing of it was searched; try again."


def _unknown_tool(name: object, names: Sequence[str] | None) -> str:
    if not names:
        return f"unknown tool {name!r} (the only tool is {SEARCH_TOOL_NAME!r})"
    return f"unknown tool {name!r} (the tools are {', '.join(repr(n) for n in names)})"


def _call_error(call: object, names: Sequence[str] | None = None) -> tuple[str, str | None, str]:
    """(id, error or None, query) of one parsed tool call (LangChain's ``{name, args, id}``).
    ``names``: the named searchers' tools; a call's query is then ``name: query`` (routed)."""
    if not isinstance(call, dict):
        return "", f"a tool call is {type(call).__name__}, not an object", ""
    cid = call.get("id") if isinstance(call.get("id"), str) else ""
    name = call.get("name")
    if name not in (names or (SEARCH_TOOL_NAME,)):
        return cid, _unknown_tool(name, names), ""
    args = call.get("args")
    query = args.get("query") if isinstance(args, dict) else None
    if not isinstance(query, str):
        shown = json.dumps(args, default=str)[:120]
        return cid, f'bad arguments {shown} ({name} takes {{"query": string}})', ""
    query = " ".join(query.split())
    if not query:
        return cid, "empty query", ""
    return cid, None, f"{name}: {query}" if names else query


#: why a reply whose text holds ``<tool_call>`` markup is not an answer (a server's tool parser could
#: not read the block, so it sent the text on as content: vLLM's Hermes parser does)
UNREAD_CALL_REASON = (
    "the reply holds a <tool_call> the server could not read as a call (each block must be a JSON object "
    'with "name" and "arguments")'
)
#: why a tools-protocol reply without a call that stopped at the token limit is not an answer
CUT_REPLY_REASON = (
    "the reply was cut at the token limit before it finished (no call, and its text is not an answer)"
)


def _read_calls(
    calls: list[Any], broken: list[Any], names: Sequence[str] | None = None
) -> tuple[list[ToolCallOutcome], list[str], list[str], list[str]]:
    """Each call's outcome, the errors, the distinct sub-queries and the duplicates dropped."""
    outcomes: list[ToolCallOutcome] = []
    errors: list[str] = []
    subs: list[str] = []
    index: dict[str, int] = {}
    dropped: list[str] = []
    for i, call in enumerate(calls):
        cid, err, query = _call_error(call, names)
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
    return outcomes, errors, subs, dropped


_ANSWER_TAG_RE = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)


def _untagged(answer: str) -> str:
    """An answer written in the text form's ``<answer>`` tags (a policy trained on ``tool_text``,
    served as a chat model) read as the tags' text, so it scores as it did in training."""
    tagged = _ANSWER_TAG_RE.findall(answer)
    return tagged[-1].strip() if tagged and tagged[-1].strip() else answer


def parse_tool_calls(
    tool_calls: object,
    content: object = "",
    invalid_tool_calls: object = (),
    *,
    max_subqueries: int = 8,
    split: bool = True,
    cut: bool = False,
    names: Sequence[str] | None = None,
) -> Action:
    """Parse one tools-protocol turn (an AI message's ``tool_calls``, ``content`` and
    ``invalid_tool_calls``) into the same :class:`Action` the tag parser returns. Never raises.
    ``names``: the named searchers' tools (each call's sub-query is ``name: query``). The rules:
    docs/architecture.md, "The tools protocol"."""
    try:
        text = content_text(content)
        calls = list(tool_calls) if isinstance(tool_calls, list | tuple) else []
        broken = list(invalid_tool_calls) if isinstance(invalid_tool_calls, list | tuple) else []
        if tool_calls is not None and not isinstance(tool_calls, list | tuple):
            return Action("invalid", reason=f"tool_calls is {type(tool_calls).__name__}, not a list")
        if not calls and not broken:
            if cut:
                return Action("invalid", reason=CUT_REPLY_REASON)
            if "<tool_call>" in text or "</tool_call>" in text:
                return Action("invalid", reason=UNREAD_CALL_REASON)
            answer = _untagged(text.strip())
            if not answer:
                return Action("invalid", reason="no tool call and no answer text")
            return Action("answer", answer=answer)
        think = text.strip() or None
        outcomes, errors, subs, dropped = _read_calls(calls, broken, names)
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


def call_replies(results: Results, calls: Calls, style: ObservationStyle) -> list[tuple[str, str, bool]]:
    """(tool_call_id, text, failed) for every call of a search, in call order: a duplicate call
    gets its sub-query's result."""
    texts = subquery_texts(results, style)
    out = []
    for cid, i in calls:
        found = i is not None and i < len(texts)
        out.append((cid, texts[i] if found else "Not searched.", found and bool(results[i].error)))
    return out


#: the name of the environment's own human messages (a corrective note), apart from the user's
NOTE_NAME = "parallelsearch"
#: the id prefix chat UIs skip (Agent Chat UI's ``DO_NOT_RENDER_ID_PREFIX``): notes are kept out
#: of ``messages`` (the ``notes`` channel); should one be shown anyway, a chat UI hides it
NOTE_ID_PREFIX = "do-not-render-"


def _note(text: str) -> Any:
    """A corrective note as the conversation keeps it: the environment's, hidden from chat UIs."""
    from uuid import uuid4

    from langchain_core.messages import HumanMessage

    return HumanMessage(content=text, name=NOTE_NAME, id=f"{NOTE_ID_PREFIX}{uuid4()}")


#: what a reply with neither a tool call nor an answer is told
TOOLS_RETRY = "Your reply had no tool call and no answer. Call search, or reply with the answer only."
#: what a reply cut at the token limit without a call is told
TOOLS_CUT = "Your reply was cut at the token limit before it finished. Call search, or reply with a short answer only."
#: what the final (answer-only) turn is told first
TOOLS_FINAL = "No more searches are possible. Reply now with the answer only, without a tool call."


class Tools(SearchProtocol):
    """A chat model's parallel tool calls: the same searches, counts and rewards as the tags."""

    name = "tools"
    default_template = "tools"
    tools = (SEARCH_TOOL,)
    chat = True
    #: the named searchers' tools (``NamedTools``); None: the one ``search`` tool
    names: tuple[str, ...] | None = None

    def parse(self, result: TurnResult, limits: Limits) -> Action:
        return parse_tool_calls(
            result.tool_calls,
            result.text if isinstance(result.text, str) else "",
            result.invalid_tool_calls,
            cut=result.finish_reason == "length",
            max_subqueries=limits.max_subqueries,
            split=limits.split,
            names=self.names,
        )

    def written(self, result: TurnResult) -> Observation:
        from langchain_core.messages import AIMessage

        text = result.text if isinstance(result.text, str) else ""
        calls = result.tool_calls or []
        msg = result.message if result.message is not None else AIMessage(content=text, tool_calls=calls)
        return Observation(render_tool_calls(text, [*calls, *result.invalid_tool_calls]), (msg,))

    def feedback(self, result: TurnResult, action: Action) -> Observation:
        from langchain_core.messages import ToolMessage

        if action.calls:
            notes = tool_feedback(action)
            msgs = tuple(ToolMessage(content=n, tool_call_id=cid, status="error") for cid, n in notes)
            return Observation("".join(format_tool_response(n) for _, n in notes), msgs)
        note = TOOLS_CUT if result.finish_reason == "length" else TOOLS_RETRY
        return Observation(f"\n{note}\n", (_note(note),))

    def read_turns(self, text: str, prompt: str | None = None) -> list:
        raise ValueError(
            "the tools protocol's turns are chat messages (the record has them); a transcript of the tool "
            "calls written as text is read with protocol 'tool_text'"
        )

    def final_note(self) -> Observation | None:
        return Observation(messages=(_note(TOOLS_FINAL),))

    def render(self, results: Results, calls: Calls, style: ObservationStyle, turn_text: str) -> Observation:
        from langchain_core.messages import ToolMessage

        replies = call_replies(results, calls, style)
        msgs = tuple(
            ToolMessage(content=text, tool_call_id=cid, status="error" if failed else "success")
            for cid, text, failed in replies
        )
        return Observation("".join(format_tool_response(text) for _, text, _ in replies) + "\n", msgs)
