"""The tools protocol as text, for training a policy that writes text: Hermes/Qwen ``<tool_call>``
JSON blocks (what vLLM's ``hermes`` tool parser reads), ended by the end of the turn, answered by
one ChatML user turn of ``<tool_response>`` blocks; the answer in ``<answer>``."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import replace
from itertools import pairwise

from parallelsearch.agents.protocol.action import Action
from parallelsearch.agents.protocol.base import Calls, Limits, Results, SearchProtocol, WrittenTurn
from parallelsearch.agents.protocol.grammar import tool_call_search_regex
from parallelsearch.agents.protocol.observation import Observation, ObservationStyle
from parallelsearch.agents.protocol.tags import response_start, split_turns
from parallelsearch.agents.protocol.tools import (
    TOOL_CALL_FEEDBACK,
    TOOL_CALL_NOT_RUN,
    call_replies,
    format_tool_response,
    parse_tool_calls,
    tool_feedback,
)
from parallelsearch.agents.protocol.turn import TurnResult

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


def read_tool_call_blocks(text: str) -> tuple[str, list[dict]]:
    """The Hermes reader: the text before the first ``<tool_call>`` block (the reasoning, or the
    whole reply when it has no block) and each block as a LangChain-style call in order (ids
    ``call_0``...; an unreadable block keeps its text under ``args`` and has ``error``)."""
    blocks = list(_TOOL_BLOCK_RE.finditer(text))
    if not blocks:
        return text, []
    return text[: blocks[0].start()], [_text_call(m.group(1), i) for i, m in enumerate(blocks)]


def server_reads_calls(text: str) -> bool:
    """Whether vLLM's Hermes tool parser reads ``text``'s ``<tool_call>`` blocks as calls: each a
    JSON object with a string ``name`` and an ``arguments`` key. Otherwise it returns the whole
    reply as content with no call, and a served agent sees that text (the gateway answers alike)."""
    for m in _TOOL_BLOCK_RE.finditer(text):
        try:
            obj = json.loads(m.group(1))
        except ValueError:
            return False
        if not isinstance(obj, dict) or not isinstance(obj.get("name"), str) or "arguments" not in obj:
            return False
    return True


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
        _, read = read_tool_call_blocks(text)
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


#: the environment's reply to a text-form turn (``tool_text_observation``): a ChatML user turn,
#: then the next assistant header; it starts with the end-of-turn when it closed a cut turn
_TOOL_REPLY_RE = re.compile(
    r"(?:<\|im_end\|>)?\n<\|im_start\|>user\n.*?<\|im_end\|>\n<\|im_start\|>assistant\n", re.DOTALL
)
#: a text-form episode's prompt end: the ``Question:`` line and the assistant header right after it (in
#: a raw prompt's episode the first ``<|im_start|>assistant`` is the environment's, after a search)
_TOOL_PROMPT_END_RE = re.compile(r"Question:[^\n]*\n(?:<\|im_end\|>\n<\|im_start\|>assistant\n)?")
#: how each corrective reply of the environment begins (one of them in a reply = a corrected turn)
_TOOL_CORRECTIONS = (
    "\n<|im_start|>user\n" + TOOL_TEXT_RETRY.split("{reason}")[0],
    "<tool_response>\n" + TOOL_CALL_FEEDBACK.split("{reason}")[0],
    "<tool_response>\n" + TOOL_CALL_NOT_RUN.split("{reason}")[0],
)
_TOOL_BLOCKS_RE = re.compile(r"<tool_call>.*?</tool_call>", re.DOTALL)
_REASONING_TAG_RE = re.compile(r"</?(?:search|information|answer|tool_call|tool_response)>")


def tool_text_format_problem(turn: str, action: Action) -> str | None:
    """Why a valid text-form turn breaks the strict format (text after its calls or answer, tags or
    unbalanced ``<think>`` in its reasoning, two answers), or None."""
    acts = list(_TOOL_BLOCKS_RE.finditer(turn)) or list(_TEXT_ANSWER_RE.finditer(turn))
    if action.kind not in ("search", "answer") or not acts:
        return None
    what = "calls" if action.kind == "search" else "answer"
    if action.kind == "answer" and len(acts) > 1:
        return "more than one <answer>"
    between = "".join(turn[x.end() : y.start()] for x, y in pairwise(acts))
    after = turn[acts[-1].end() :].strip()
    if between.strip() or after not in ("", TOOL_TURN_END):
        return f"text after the {what}: {(between.strip() or after)[:40]!r}"
    reasoning = turn[: acts[0].start()]
    tag = _REASONING_TAG_RE.search(reasoning)
    if tag:
        return f"{tag.group(0)} in the reasoning before the {what}"
    if reasoning.count("<think>") != reasoning.count("</think>"):
        return "unbalanced <think> in the reasoning"
    return None


class ToolText(SearchProtocol):
    """The tools protocol written as text (training's form of it)."""

    name = "tool_text"
    default_template = "tool_text"
    stop = TOOL_STOP_STRINGS

    def parse(self, result: TurnResult, limits: Limits) -> Action:
        return parse_tool_text(result.text, max_subqueries=limits.max_subqueries, split=limits.split)

    def feedback(self, result: TurnResult, action: Action) -> Observation:
        """One ``<tool_response>`` per call, or one retry note for a turn without calls (the
        policy's text stays verbatim, as training tokenised it)."""
        text = result.text if isinstance(result.text, str) else ""
        closed = text.rstrip().endswith(TOOL_TURN_END)
        if action.calls:
            return Observation(tool_text_observation([note for _, note in tool_feedback(action)], closed))
        note = TOOL_TEXT_RETRY.format(reason=action.reason or "invalid turn")
        return Observation(tool_text_observation([], closed, note))

    def render(self, results: Results, calls: Calls, style: ObservationStyle, turn_text: str) -> Observation:
        replies = call_replies(results, calls, style)
        closed = turn_text.rstrip().endswith(TOOL_TURN_END)
        return Observation(tool_text_observation([text for _, text, _ in replies], closed))

    def search_grammar(self, n: int, max_stages: int, query_chars: int) -> str:
        return tool_call_search_regex(n, max_stages, query_chars)

    def format_problem(self, text: str, action: Action) -> str | None:
        return tool_text_format_problem(text, action)

    def read_turns(self, text: str, prompt: str | None = None) -> list[WrittenTurn]:
        body = text[response_start(text, prompt, (_TOOL_PROMPT_END_RE,)) :]
        return split_turns(body, _TOOL_REPLY_RE, lambda reply: any(h in reply for h in _TOOL_CORRECTIONS))
