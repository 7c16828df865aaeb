"""Opening and closing an episode: ``begin`` reads the question and resets a thread's episode
channels; ``answer`` (with a separate answer policy, one more turn) writes the reply and
completes the thread's history record (docs/architecture.md, "Threads")."""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Mapping
from typing import Any

from langchain_core.messages import AIMessage, HumanMessage, RemoveMessage
from langchain_core.runnables import RunnableConfig
from langgraph.runtime import Runtime
from langgraph.types import Overwrite

from parallelsearch.agents.protocol import Limits, content_text
from parallelsearch.graphs.conversation import orphan_tool_messages, spoken_history, system_text
from parallelsearch.graphs.engine import EpisodeEngine
from parallelsearch.graphs.nodes.common import ms_since, only_changed, usage_update
from parallelsearch.graphs.nodes.planner import not_searched
from parallelsearch.graphs.record import turn_record
from parallelsearch.graphs.state import SearchState
from parallelsearch.graphs.turns import turn_request

log = logging.getLogger(__name__)
#: an episode's counts as it begins
ZERO_COUNTS = dict.fromkeys(
    ("policy_calls", "search_rounds", "subqueries", "resolver_calls", "passages", "errors"), 0
)
#: the AI message of an episode that ended without an answer
NO_ANSWER = "No answer: the planner did not give one within its turns."
#: the channels an episode owns, written again when a thread's next episode begins
_EPISODE_CHANNELS = ("answer", "status", "total_ms", "last_action", "next_stage", "notes")


def _last_human(messages: list[Any]) -> HumanMessage | None:
    """The conversation's last human message (a note of the environment's is none)."""
    from parallelsearch.agents.protocol.tools import NOTE_NAME

    return next((m for m in reversed(messages) if isinstance(m, HumanMessage) and m.name != NOTE_NAME), None)


def _question(state: Mapping[str, Any]) -> tuple[str, HumanMessage | None]:
    """The question and its message: the last message when it is a human message no earlier
    episode answered, else the ``question`` input, else the conversation's last human message
    (the agent as a node after a router's message, a handoff, or its own earlier answer, as
    ``create_agent`` answers there)."""
    history = state.get("history") or []
    messages = state.get("messages") or []
    last = messages[-1] if messages else None
    consumed = history[-1].get("asked") if history else None
    asked = last if isinstance(last, HumanMessage) and (last.id is None or last.id != consumed) else None
    q = content_text(asked.content) if asked is not None else state.get("question")
    if (not isinstance(q, str) or not q.strip()) and asked is None and not state.get("question"):
        asked = _last_human(messages)
        q = content_text(asked.content) if asked is not None else None
    if not isinstance(q, str) or not q.strip():
        kinds = ", ".join(dict.fromkeys(getattr(m, "type", type(m).__name__) for m in messages)) or "none"
        raise ValueError(
            "the graph input needs a non-empty 'question' string or 'messages' holding a human message "
            f"(the agent answers the conversation's last one); got {len(messages)} message(s) ({kinds}) "
            "and no question"
        )
    meta = state.get("metadata")
    if meta is not None and not isinstance(meta, dict):
        raise ValueError(f"the graph input's 'metadata' must be an object, got {type(meta).__name__}")
    return q, asked


def _history_records(history: list[dict[str, Any]], q: str, meta: Any, asked_id: Any, started: float) -> list:
    """The thread's records this episode adds: an abandoned predecessor's, then its own."""
    episode = history[-1]["episode"] + 1 if history else 0
    records: list[dict[str, Any]] = []
    if history and history[-1].get("status") == "running":
        # the previous episode never reached its answer (an error, or new input while it waited)
        records.append({"episode": episode - 1, "status": "abandoned"})
    records.append(
        {
            "episode": episode,
            "question": q,
            "metadata": dict(meta or {}),
            "status": "running",
            "started_at": started,
            "asked": asked_id,
        }
    )
    return records


def _dropped_orphans(messages: list[Any]) -> list[RemoveMessage]:
    """Removals of the caller's tool messages that answer no call in ``messages`` (a chat UI that
    cut its window from the front), said once: a strict provider refuses such a history."""
    orphans = [m for m in orphan_tool_messages(messages) if m.id is not None] if messages else []
    if orphans:
        log.warning(
            "dropped %d tool message(s) whose tool call is not in the conversation (tool_call_id %s): "
            "a chat model's API refuses a tool result without its call",
            len(orphans),
            ", ".join(repr(m.tool_call_id) for m in orphans[:3]),
        )
    return [RemoveMessage(id=m.id) for m in orphans]  # type: ignore[arg-type]


async def begin(
    engine: EpisodeEngine, state: SearchState, config: RunnableConfig, runtime: Runtime
) -> dict[str, Any]:
    """Open an episode: every run with input passes here once (a resumed run does not). On a
    thread that holds one, the episode's channels are reset; the earlier stays in ``history``."""
    cfg = engine.configured(config, runtime)
    q, asked = _question(state)
    meta = state.get("metadata")
    prompt = engine.protocol.prompt(q, cfg.prompt_template, engine.stores)
    system = ""
    if not engine.protocol.chat:  # a text protocol reads the system prompt and the thread as text
        earlier = [m for m in state.get("messages") or [] if m is not asked]
        prompt = engine.protocol.with_history(prompt, spoken_history(earlier, cfg))
        system = system_text(state.get("messages") or [], cfg, None)
    segments = [("prompt", prompt)]
    if system:  # a text protocol's policy reads the system prompt first (a chat model as a system message)
        segments.insert(0, ("system", system + "\n\n"))
    started = time.time()
    if asked is None:  # a {"question"} input: the question joins the conversation
        asked = HumanMessage(content=q, id=str(uuid.uuid4()))
    update: dict[str, Any] = {
        "history": _history_records(state.get("history") or [], q, meta, asked.id, started),
        "protocol": engine.protocol.name,
        "transcript": "".join(text for _, text in segments),
        "segments": segments,
        "round": 0,
        "started_at": started,
        **ZERO_COUNTS,
        "labels": [],
        "tokens_in": None,
        "tokens_out": None,
        "policy": getattr(engine.policy, "name", type(engine.policy).__name__),
    }
    if state.get("question") != q:
        update["question"] = q
    dropped = _dropped_orphans(state.get("messages") or [])
    new = not any(m is asked for m in state.get("messages") or [])  # a question input joins the thread
    if new or dropped:
        update["messages"] = [*dropped, *([asked] if new else [])]
    if meta:
        update["metadata"] = {}  # consumed: a later question on the thread does not inherit it
    if engine.structured is not None:
        update["structured_response"] = None  # an answer's, not the thread's (create_agent clears it too)
    if state.get("transcript"):
        # the thread holds an earlier episode: its reducer channels start empty again
        update.update(
            dict.fromkeys(_EPISODE_CHANNELS),
            stage=0,
            trajectory=Overwrite([]),
            results=Overwrite([]),
            node_ms=Overwrite({}),
        )
    return only_changed(state, update)


async def _answer_turn(
    engine: EpisodeEngine, state: SearchState, config: RunnableConfig, runtime: Runtime, t0: float
) -> tuple[str | None, dict[str, Any]]:
    """The answer policy's turn, on the transcript before the planner's own answer (if any)."""
    cfg = engine.configured(config, runtime)
    answer = state.get("answer")
    st = dict(state)
    last = (st.get("segments") or [])[-1:]
    if answer is not None and last and last[0][0] == "policy":
        st["transcript"] = st["transcript"][: len(st["transcript"]) - len(last[0][1])]
        st["segments"] = st["segments"][:-1]
    request = turn_request(st, cfg, engine.protocol, final=True, role="answer")
    assert engine.answer_policy is not None
    res = await engine.answer_policy.agenerate(request)
    act = engine.protocol.parse(res, Limits(cfg.max_subqueries, cfg.split_subqueries))
    calls = state.get("policy_calls", 0)
    turn = turn_record(res, act, index=calls, final=True, ms=ms_since(t0)) | {"role": "answer"}
    update = {"policy_calls": calls + 1, "trajectory": [turn], **usage_update(state, res)}
    return (act.answer if act.kind == "answer" else answer), update


def _reply(
    engine: EpisodeEngine, state: SearchState, update: dict[str, Any], given: str | None, status: str
) -> AIMessage:
    """The episode's final AI message. A chat protocol's answer is the model's own reply (named,
    its metadata kept, the status added: written again under its id); any other is a new message,
    under the id of the answering model reply when there is one, so a UI that streamed that
    reply replaces it instead of showing the answer twice."""
    meta = {"status": status}
    last = (state.get("messages") or [None])[-1]
    turns = [
        t for t in [*(state.get("trajectory") or []), *update.get("trajectory", [])] if t["type"] == "turn"
    ]
    planned = {t.get("message_id") for t in turns}
    # a chat protocol's answer, or the reply a middleware ended the run with (a call limit's)
    if engine.protocol.chat and isinstance(last, AIMessage) and not last.tool_calls:
        if given is not None or (last.id not in planned and content_text(last.content).strip()):
            if last.name == engine.graph_name and (last.response_metadata or {}).get("status") == status:
                return last
            merged = {**(last.response_metadata or {}), **meta}
            return last.model_copy(update={"name": engine.graph_name, "response_metadata": merged})
    answered_by = turns[-1].get("message_id") if turns and given is not None else None
    return AIMessage(
        content=given if given is not None else NO_ANSWER,
        name=engine.graph_name,
        response_metadata=meta,
        **({"id": answered_by} if answered_by else {}),
    )


async def answer(
    engine: EpisodeEngine, state: SearchState, config: RunnableConfig, runtime: Runtime
) -> dict[str, Any]:
    """Close the episode: the reply as an AIMessage, the status, the thread's history record."""
    t0 = time.perf_counter()
    given, update = state.get("answer"), {}
    if engine.answer_policy is not None:
        given, update = await _answer_turn(engine, state, config, runtime, t0)
    status = "answered" if given is not None else "unanswered"
    if given is None:
        engine.warn_unanswered([t for t in state.get("trajectory") or [] if t.get("type") == "turn"])
    total_ms = round((time.time() - (state.get("started_at") or time.time())) * 1000, 3)
    history = state.get("history") or [{"episode": 0}]
    reply = _reply(engine, state, update, given, status)
    record = {
        "episode": history[-1]["episode"],
        "status": status,
        "answer": given,
        "policy_calls": update.get("policy_calls", state.get("policy_calls", 0)),
        **{k: state.get(k, 0) for k in ("search_rounds", "subqueries", "resolver_calls")},
        "total_ms": total_ms,
    }
    last = (state.get("messages") or [None])[-1]
    # a structured answer ends with its output tool's message, as create_agent's does; the planner's
    # own answer, already complete, is not sent twice
    structured_end = state.get("structured_response") is not None and getattr(last, "type", None) == "tool"
    if not structured_end and (reply is not last or (last.response_metadata or {}).get("status") != status):
        update["messages"] = [reply]
    closed = not_searched(state.get("messages") or []) if engine.protocol.chat else []
    if closed:  # calls the episode ends without searching (the final turn's), answered before the reply
        update["messages"] = [*closed, *update.get("messages", [])]
    update.update(
        answer=given,
        status=status,
        total_ms=total_ms,
        node_ms={"answer": ms_since(t0)},
        history=[record],
    )
    return (
        update  # whole: a UI reading the answer node's update (stream_mode="updates") finds the answer there
    )
