"""What a chat protocol's planner reads: one system message (the graph's system prompt, the
input's system messages, the protocol's instructions), the thread's earlier messages (bounded,
complete exchanges only), then the episode's own messages, as ``create_agent`` sends them."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from langchain_core.messages import AIMessage, AnyMessage, HumanMessage, SystemMessage, ToolMessage

from parallelsearch.agents.protocol import SearchProtocol, content_text
from parallelsearch.graphs.config import GraphConfig

#: message kinds by their ``type`` (a string compare: ``isinstance`` on a message class costs
#: more, on every message of a growing thread, twice a turn); chunks count as their messages
_AI = frozenset({"ai", "AIMessageChunk"})
_TOOL = frozenset({"tool", "ToolMessageChunk"})
_SYSTEM = frozenset({"system", "SystemMessageChunk"})


def system_text(messages: Sequence[AnyMessage], cfg: GraphConfig, protocol: SearchProtocol | None) -> str:
    """The system prompt, then the input's system messages, then the protocol's instructions."""
    parts = [cfg.system_prompt or ""]
    parts += [content_text(m.content) for m in messages if m.type in _SYSTEM]
    if protocol is not None:
        parts.append(protocol.instructions(cfg.prompt_template))
    return "\n\n".join(p.strip() for p in parts if p and p.strip())


def orphan_tool_messages(messages: Sequence[AnyMessage]) -> list[ToolMessage]:
    """The tool messages no earlier AI message called (a caller's window cut from the front), and
    a second answer to a call already answered: a chat API refuses an answer without its call."""
    called: set[str | None] = set()
    orphans = []
    for m in messages:
        kind = m.type
        if kind in _AI:
            called.update(c.get("id") for c in m.tool_calls)  # type: ignore[union-attr]
        elif kind in _TOOL:
            if m.tool_call_id not in called:  # type: ignore[union-attr]
                orphans.append(m)
            called.discard(m.tool_call_id)  # type: ignore[union-attr]
    return orphans  # type: ignore[return-value]


def _complete(history: Sequence[AnyMessage]) -> list[AnyMessage]:
    """``history`` without an AI message whose tool calls were not all answered (an abandoned or
    partly reviewed search), without any tool message of it, and without a tool message that
    answers no earlier call: chat APIs refuse a call without its answer, and an answer without
    its call (a strict server's 400)."""
    dropped = {id(m) for m in orphan_tool_messages(history)}
    answered = {m.tool_call_id for m in history if m.type in _TOOL}  # type: ignore[union-attr]
    dropped_calls: set[str | None] = set()
    for m in history:
        calls = m.tool_calls if m.type in _AI else None  # type: ignore[union-attr]
        if calls and not all(c.get("id") in answered for c in calls):
            dropped.add(id(m))
            dropped_calls.update(c.get("id") for c in calls)
    if not dropped:
        return list(history)
    return [
        m
        for m in history
        if id(m) not in dropped and not (m.type in _TOOL and m.tool_call_id in dropped_calls)  # type: ignore[union-attr]
    ]


def _units(turn: Sequence[AnyMessage]) -> list[list[AnyMessage]]:
    """``turn`` in the pieces trimming keeps or drops whole: an AI message with tool calls together
    with the tool messages that answer it, every other message alone."""
    units: list[list[AnyMessage]] = []
    calls: dict[str | None, list[AnyMessage]] = {}
    for m in turn:
        if isinstance(m, ToolMessage) and m.tool_call_id in calls:
            calls[m.tool_call_id].append(m)
            continue
        units.append([m])
        if isinstance(m, AIMessage) and m.tool_calls:
            calls.update((c.get("id"), units[-1]) for c in m.tool_calls)
    return units


def _turns(history: Sequence[AnyMessage]) -> list[list[AnyMessage]]:
    """``history`` cut before each human message (a caller's opening messages are a turn of their own)."""
    turns: list[list[AnyMessage]] = [[]]
    for m in history:
        if isinstance(m, HumanMessage) and turns[-1]:
            turns.append([])
        turns[-1].append(m)
    return [t for t in turns if t]


def _newest_that_fit(history: Sequence[AnyMessage], fits: Callable[[int, int], bool]) -> list[AnyMessage]:
    """The newest turns of ``history`` that fit whole (``fits(messages, tokens)``), then, of the
    turn before them, its question and replies with the newest of its searches that still fit
    (a search's calls and results kept or dropped together); starting at a question, as
    LangChain's ``trim_messages(strategy="last", start_on="human")`` keeps a conversation."""
    from langchain_core.messages.utils import count_tokens_approximately

    kept: list[AnyMessage] = []
    used = [0, 0]  # messages, approximate tokens (the count adds up per message)
    for turn in reversed(_turns(history)):
        if not isinstance(turn[0], HumanMessage):
            break  # opening messages without a question: not kept once the history is cut
        units = [(u, len(u), count_tokens_approximately(u)) for u in _units(turn)]
        total = [sum(n for _, n, _ in units), sum(t for _, _, t in units)]
        if fits(used[0] + total[0], used[1] + total[1]):
            kept[:0], used = turn, [used[0] + total[0], used[1] + total[1]]
            continue
        core = [x for x in units if not (isinstance(x[0][0], AIMessage) and x[0][0].tool_calls)]
        need = [used[0] + sum(n for _, n, _ in core), used[1] + sum(t for _, _, t in core)]
        if not fits(*need):
            break
        chosen = {id(u) for u, _, _ in core}
        for u, n, t in reversed([x for x in units if id(x[0]) not in chosen]):
            if not fits(need[0] + n, need[1] + t):
                break
            chosen.add(id(u))
            need = [need[0] + n, need[1] + t]
        kept[:0] = [m for u, _, _ in units if id(u) in chosen for m in u]
        break
    return kept


def from_first_question(history: list[AnyMessage]) -> list[AnyMessage]:
    """``history`` from its first human message on: providers refuse a conversation whose first
    message after the system message is not the user's (what is left of a window cut from the
    front, an assistant's greeting), and tool messages go with the calls they answer."""
    first = next((i for i, m in enumerate(history) if isinstance(m, HumanMessage)), len(history))
    return history[first:] if first else history


def bounded_history(history: Sequence[AnyMessage], cfg: GraphConfig) -> list[AnyMessage]:
    """``history`` (complete exchanges only, from its first question) within ``max_history_messages`` and
    ``max_history_tokens``: kept whole when it fits both, else its newest messages that fit,
    starting at a question, tool calls with their results (:func:`_newest_that_fit`)."""
    from langchain_core.messages.utils import count_tokens_approximately

    kept = from_first_question(_complete(history))
    most, tokens = cfg.max_history_messages, cfg.max_history_tokens
    over_count = most is not None and len(kept) > most
    if not over_count and (tokens is None or count_tokens_approximately(kept) <= tokens):
        return kept

    def fits(n: int, t: int) -> bool:
        return (most is None or n <= most) and (tokens is None or t <= tokens)

    return _newest_that_fit(kept, fits)


def spoken_history(history: Sequence[AnyMessage], cfg: GraphConfig) -> list[tuple[str, str]]:
    """A text protocol's view of the thread's earlier messages: the bounded history's questions
    and replies as ``(role, text)`` pairs for its prompt (searches, their results and empty
    replies are left out: the text policy reads its own episode's searches, not old ones)."""
    out: list[tuple[str, str]] = []
    for m in bounded_history([m for m in history if not isinstance(m, SystemMessage)], cfg):
        text = content_text(m.content).strip()
        if text and isinstance(m, HumanMessage | AIMessage):
            out.append(("user" if isinstance(m, HumanMessage) else "assistant", text))
    return out


def chat_messages(state: Mapping[str, Any], cfg: GraphConfig, protocol: SearchProtocol) -> list[AnyMessage]:
    """The planner's messages: the system message, the bounded history, the episode so far."""
    messages = [m for m in state.get("messages") or [] if m.type not in _SYSTEM]
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
