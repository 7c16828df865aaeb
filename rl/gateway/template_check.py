"""``train --check`` in gateway mode: the chat template must be append-only for tool turns, the
property the gateway's suffix rendering relies on and that serving needs to show the model what
training showed it. A generated canonical tool call must round-trip (the template's render of
the assistant's call is the generation prompt, then text the Hermes reader reads back as the
same call, then the end of the turn), and a later message must not re-render earlier turns
(such as dropping ``<think>`` blocks of earlier assistant turns)."""

from __future__ import annotations

import json
from typing import Any

from parallelsearch.agents.protocol import SEARCH_TOOL, SEARCH_TOOL_NAME
from parallelsearch.rl.gateway.errors import GatewayError
from parallelsearch.rl.gateway.messages import read_reply
from parallelsearch.rl.gateway.template import ChatTemplate

_USER = {"role": "user", "content": "Who directed Inception?"}
_ARGS = {"query": "Inception director"}
_CALL = {"id": "call_0", "type": "function", "function": {"name": SEARCH_TOOL_NAME, "arguments": _ARGS}}
_TOOLS = [SEARCH_TOOL]


def _round_trip(t: ChatTemplate) -> str | None:
    """Why a generated canonical call does not come back as itself, or None."""
    prompt = t.render([_USER], _TOOLS)
    turn = t.render(
        [_USER, {"role": "assistant", "content": "", "tool_calls": [_CALL]}], _TOOLS, generation=False
    )
    if not turn.startswith(prompt):
        return "an assistant turn with a tool call does not continue the generation prompt"
    generated = turn[len(prompt) :]
    if not generated.endswith(t.end + t.trailer):
        return f"an assistant turn with a tool call does not end with {t.end!r}"
    message = read_reply(generated[: -len(t.trailer) or None], t.end, 0)
    calls = message.get("tool_calls") or []
    read = [(c["function"]["name"], json.loads(c["function"]["arguments"] or "null")) for c in calls]
    if read != [(SEARCH_TOOL_NAME, _ARGS)]:
        shown = generated[:80].replace("\n", "\\n")
        return (
            f"a rendered tool call ({shown!r}) is not read back as the call by the Hermes reader (got {read})"
        )
    return None


def _history(t: ChatTemplate) -> str | None:
    """Why a later message re-renders earlier turns, or None."""
    thought = {"role": "assistant", "content": "<think> recall the film </think>\nChristopher Nolan"}
    cases = [
        (
            [_USER, {"role": "assistant", "content": "", "tool_calls": [_CALL]}],
            {"role": "tool", "tool_call_id": "call_0", "content": "Doc 1"},
        ),
        ([_USER, thought], {"role": "user", "content": "Where was he born?"}),
    ]
    for history, after in cases:
        before = t.render(history, _TOOLS, generation=False)
        later = t.render([*history, after], _TOOLS, generation=True)
        if later.startswith(before):
            continue
        if "<think>" in before and "<think>" not in later:
            return "it strips <think> blocks from earlier assistant turns once a new user message follows"
        return f"it re-renders earlier turns when a {after['role']} message follows"
    return None


def check_gateway_template(tokenizer: Any) -> tuple[str, str]:
    """(the ok line, the template's digest), or a ValueError naming the problem and the fix."""
    try:
        t = ChatTemplate(tokenizer)
    except GatewayError as e:
        raise ValueError(f"gateway mode: {e.message}") from e
    for problem in (_round_trip(t), _history(t)):
        if problem:
            raise ValueError(
                f"the chat template is not append-only for tool turns: {problem}; gateway mode trains the "
                "tokens the engine generated, which a served model would then not be shown the same way "
                "(use a template that renders history as generated, e.g. Qwen2.5's)"
            )
    line = "chat template append-only for tool turns (a canonical tool call round-trips; history is not re-rendered)"
    return line, t.digest()
