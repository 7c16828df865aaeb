"""What a chat protocol's planner reads: one system message (the graph's system prompt, the
input's system messages, the protocol's instructions), the thread's earlier messages (bounded,
complete exchanges only), then the episode's own messages, as ``create_agent`` sends them."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from langchain_core.messages import AIMessage, AnyMessage, SystemMessage, ToolMessage

from parallelsearch.agents.protocol import SearchProtocol, content_text
from parallelsearch.graphs.config import GraphConfig


def system_text(messages: Sequence[AnyMessage], cfg: GraphConfig, protocol: SearchProtocol | None) -> str:
    """The system prompt, then the input's system messages, then the protocol's instructions."""
    parts = [cfg.system_prompt or ""]
    parts += [content_text(m.content) for m in messages if isinstance(m, SystemMessage)]
    if protocol is not None:
        parts.append(protocol.instructions(cfg.prompt_template))
    return "\n\n".join(p.strip() for p in parts if p and p.strip())


def orphan_tool_messages(messages: Sequence[AnyMessage]) -> list[ToolMessage]:
    """The tool messages no earlier AI message called (a caller's window cut from the front):
    a chat API refuses an answer without its call."""
    called: set[str | None] = set()
    orphans = []
    for m in messages:
        if isinstance(m, AIMessage):
            called.update(c.get("id") for c in m.tool_calls)
        elif isinstance(m, ToolMessage) and m.tool_call_id not in called:
            orphans.append(m)
    return orphans


def _complete(history: Sequence[AnyMessage]) -> list[AnyMessage]:
    """``history`` without an AI message whose tool calls were not all answered (an abandoned or
    partly reviewed search), without any tool message of it, and without a tool message that
    answers no earlier call: chat APIs refuse a call without its answer, and an answer without
    its call (a strict server's 400)."""
    orphans = {id(m) for m in orphan_tool_messages(history)}
    answered = {m.tool_call_id for m in history if isinstance(m, ToolMessage)}
    dropped_ai: set[int] = set()
    dropped_calls: set[str | None] = set()
    for i, m in enumerate(history):
        calls = m.tool_calls if isinstance(m, AIMessage) else None
        if calls and not all(c.get("id") in answered for c in calls):
            dropped_ai.add(i)
            dropped_calls.update(c.get("id") for c in calls)
    return [
        m
        for i, m in enumerate(history)
        if i not in dropped_ai
        and id(m) not in orphans
        and not (isinstance(m, ToolMessage) and m.tool_call_id in dropped_calls)
    ]


def bounded_history(history: Sequence[AnyMessage], cfg: GraphConfig) -> list[AnyMessage]:
    """The last of ``history`` within ``max_history_messages`` and ``max_history_tokens``; a history
    over a bound is cut to start at a human message so no tool message loses its call, one within
    both is kept whole (an opening assistant message included)."""
    from langchain_core.messages import trim_messages
    from langchain_core.messages.utils import count_tokens_approximately

    kept = _complete(history)
    if cfg.max_history_messages is not None and len(kept) > cfg.max_history_messages:
        kept = trim_messages(kept, max_tokens=cfg.max_history_messages, token_counter=len, start_on="human")
    if cfg.max_history_tokens is not None and count_tokens_approximately(kept) > cfg.max_history_tokens:
        kept = trim_messages(
            kept,
            max_tokens=cfg.max_history_tokens,
            token_counter=count_tokens_approximately,
            start_on="human",
        )
    return list(kept)


def chat_messages(state: Mapping[str, Any], cfg: GraphConfig, protocol: SearchProtocol) -> list[AnyMessage]:
    """The planner's messages: the system message, the bounded history, the episode so far."""
    messages = [m for m in state.get("messages") or [] if not isinstance(m, SystemMessage)]
    asked = ((state.get("history") or [{}])[-1]).get("asked")
    start = next((i for i, m in enumerate(messages) if m.id is not None and m.id == asked), len(messages))
    system = system_text(state.get("messages") or [], cfg, protocol)
    head = [SystemMessage(content=system)] if system else []
    episode = with_notes(messages[start:], state.get("notes") or [])
    return [*head, *bounded_history(messages[:start], cfg), *episode]


def with_notes(episode: Sequence[AnyMessage], notes: Sequence[Sequence[Any]]) -> list[AnyMessage]:
    """``episode`` with each of the environment's notes right after the message it answers: what
    the model was told, where it was told it (a note whose message a middleware removed goes
    with it)."""
    out = list(episode)
    for after, note in notes:
        at = next((i for i, m in enumerate(out) if after is not None and m.id == after), None)
        if at is not None:
            out.insert(at + 1, note)
    return out
