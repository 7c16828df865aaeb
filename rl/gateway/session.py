"""One episode's session behind ``/v1/chat/completions``: the token ledger the sample is made
of, and the message history every request is checked against.

The first request is rendered whole with the chat template; each reply is the engine's own ids
and log-probs, appended to the ledger untouched; each later request must repeat the history
message by message and may only add tool, user or system messages, which are rendered as a
suffix (:class:`ChatTemplate`). A repeated request (a client's retry) gets the cached reply. Any
other request (a ``@dynamic_prompt`` whose system message changed, a middleware that rewrote the
history) is a fork: the sample restarts at that request's own render, which is what the engine is
sent, so every turn the sample trains on was generated from exactly the tokens before it; the
turns before the fork stay in the render as context, without loss (docs/training.md, "Through
the gateway"). Every model call has a deadline (``SessionLimits.call_timeout_s``); a session
that missed one is stuck: it answers no more, and its sample fails closed.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from parallelsearch.rl.episode import Generated, TokenLedger
from parallelsearch.rl.executor import sampled_logprobs, turn_params
from parallelsearch.rl.gateway.conversation import HeldTurn
from parallelsearch.rl.gateway.errors import GatewayError
from parallelsearch.rl.gateway.messages import NEW_ROLES, canonical_all, read_reply, template_message
from parallelsearch.rl.gateway.sampling import ClientSampling, trainer_owned
from parallelsearch.rl.gateway.template import ChatTemplate


@dataclass
class GatewayCounters:
    """What a session counts (each becomes an ``extra_logs`` entry of the sample)."""

    requests: int = 0
    forks: int = 0
    retries: int = 0
    overridden: dict[str, int] = field(default_factory=dict)
    no_room: int = 0  # requests answered without generating: the context was full
    drifts: int = 0  # forks where only the leading system message changed (a dynamic prompt)
    untrained_turns: int = 0  # turns before the last fork: context of the sample, without loss
    stuck: int = 0  # the episode missed a deadline and failed closed

    def logs(self, retokenized: int, mismatches: int, failed: bool) -> dict[str, float]:
        return {
            "gateway_requests": float(self.requests),
            "gateway_forks": float(self.forks),
            "gateway_prompt_drifts": float(self.drifts),
            "gateway_untrained_turns": float(self.untrained_turns),
            "gateway_stuck": float(self.stuck),
            "gateway_retries": float(self.retries),
            "gateway_overridden": float(sum(self.overridden.values())),
            "gateway_retokenized": float(retokenized),
            "gateway_token_mismatches": float(mismatches),
            "gateway_failed_closed": float(failed),
        }


@dataclass
class SessionLimits:
    """The trainer's side of every turn: its sampling params, the per-turn cap, the context."""

    sampling_params: Any
    turn_cap: int
    max_length: int | None = None
    want_logprobs: bool = False
    client_sampling: ClientSampling = "override"
    call_timeout_s: float = 600.0  # one model call's deadline, and the longest an episode may idle


class GatewaySession:
    """One episode's OpenAI chat endpoint over an engine with ``generate(token_ids, params)``."""

    def __init__(self, template: ChatTemplate, engine: Any, limits: SessionLimits):
        self.id = uuid.uuid4().hex[:12]
        self.template = template
        self.engine = engine
        self.limits = limits
        self.counters = GatewayCounters()
        self.ledger: TokenLedger | None = None
        self.tools_key: str | None = None
        self.history: list[dict[str, Any]] = []  # canonical messages, the last reply included
        self.last_request: list[dict[str, Any]] | None = None
        self.last_reply: dict[str, Any] | None = None
        self.closed = True  # the last generated turn ended with the end-of-turn token
        self.failed = False  # the episode got stuck: the sample carries no loss
        self.stuck_reason: str | None = None
        self.calls: list[tuple[list[int], list[int]]] = []  # (ids sent, ids generated) per engine call
        self.held: list[HeldTurn] = []  # every reply, in order: the conversation the reward reads
        self.answered: dict[str, Any] = {}  # tool_call_id -> the tool message the agent sent back
        self.first_tools: Any = None  # the tools of the first request (what the agent offers its model)
        self.loop: asyncio.AbstractEventLoop | None = (
            None  # the episode's loop (a sync client hands over to it)
        )
        self.last_activity = time.monotonic()
        self.in_call = False
        self._lock = asyncio.Lock()

    def _note_request(self, norm: list[dict[str, Any]], tools: Any) -> None:
        """What the agent did since the last reply: the tool messages answering its calls."""
        if self.counters.requests == 1:
            self.first_tools = tools
        for m in norm:
            if m["role"] == "tool" and m.get("tool_call_id") is not None:
                self.answered[m["tool_call_id"]] = m["content"]

    def where(self) -> str:
        """The episode's step as the session sees it: which model call, and what was awaited."""
        n = self.counters.requests
        if self.in_call:
            return f"in model call {n} (the engine's generate)"
        if n == 0:
            return "before its first model call (the agent's own start: middleware, state)"
        reply = (self.last_reply or {}).get("choices", [{}])[0].get("message") or {}
        calls = len(reply.get("tool_calls") or [])
        after = f"{calls} tool call(s)" if calls else "an answer"
        return f"after model call {n}, which replied with {after} (the agent's own work: tools, middleware)"

    def mark_stuck(self, reason: str) -> None:
        """The episode missed a deadline: the session answers no more, the sample fails closed."""
        if self.stuck_reason is None:
            self.stuck_reason, self.failed = reason, True
            self.counters.stuck = 1

    async def complete(self, body: Any) -> dict[str, Any]:
        """The OpenAI chat completion for ``body``; a client mistake raises a 4xx GatewayError."""
        if not isinstance(body, dict):
            raise GatewayError(400, "the request body must be a JSON object")
        for name in trainer_owned(body, self.limits.client_sampling):
            self.counters.overridden[name] = self.counters.overridden.get(name, 0) + 1
        messages = body.get("messages")
        norm = canonical_all(messages)
        tools = body.get("tools") or None
        if self.stuck_reason is not None:
            raise GatewayError(503, f"the episode's session stopped: {self.stuck_reason}")
        async with self._lock:
            self.counters.requests += 1
            if self.last_request is not None and norm == self.last_request and self.last_reply is not None:
                self.counters.retries += 1
                return self.last_reply
            self.in_call, self.last_activity = True, time.monotonic()
            self._note_request(norm, tools)
            try:
                message, finish, usage = await self._turn(messages, norm, tools)
            finally:
                self.in_call, self.last_activity = False, time.monotonic()
            self.held.append(HeldTurn(message, finish))
            reply = _completion(self.id, self.counters.requests, body.get("model"), message, finish, usage)
            self.last_request, self.last_reply = norm, reply
            self.history = [*norm, *canonical_all([message])]
            return reply

    async def _turn(
        self, messages: list[Any], norm: list[dict[str, Any]], tools: Any
    ) -> tuple[dict[str, Any], str, tuple[int, int]]:
        key = json.dumps(tools, sort_keys=True)
        if self.ledger is None:
            self._start(messages, tools, key)
        elif not self._continues(norm, key):
            self.counters.forks += 1
            self.counters.drifts += self._drifted(norm, key)
            self.counters.untrained_turns += len(self.ledger.ranges)
            self._start(messages, tools, key)
        else:
            new = [template_message(m) for m in messages[len(self.history) :]]
            self.ledger.add_observation(self.template.suffix(new, tools, closed=self.closed))
        return await self._ledger_turn()

    def start_from(self, messages: list[Any]) -> None:
        """A ledger from ``messages`` alone (a sample for an episode that never called its model)."""
        self._start(messages, None, json.dumps(None))

    def _start(self, messages: list[Any], tools: Any, key: str) -> None:
        """A ledger from the request's own render: the first request's, or a fork's (the sample
        restarts there: its earlier turns are in that render as context, without loss)."""
        self.tools_key, self.calls, self.closed = key, [], True
        prompt = self.template.render([template_message(m) for m in messages], tools)
        lim = self.limits
        self.ledger = TokenLedger(self.template.tokenizer, prompt, lim.max_length, turn_cap=lim.turn_cap)

    def _continues(self, norm: list[dict[str, Any]], tools_key: str) -> bool:
        """The request repeats the history and adds only tool, user or system messages."""
        n = len(self.history)
        if tools_key != self.tools_key or len(norm) <= n or norm[:n] != self.history:
            return False
        return all(m["role"] in NEW_ROLES for m in norm[n:])

    def _drifted(self, norm: list[dict[str, Any]], tools_key: str) -> bool:
        """Only the leading system message changed (what a ``@dynamic_prompt`` does each call)."""
        n, old = len(self.history), self.history
        if tools_key != self.tools_key or len(norm) <= n or not old or old[0]["role"] != "system":
            return False
        return norm[0]["role"] == "system" and norm[1:n] == old[1:] and norm[0] != old[0]

    async def _ledger_turn(self) -> tuple[dict[str, Any], str, tuple[int, int]]:
        """One turn generated on the ledger's ids and appended to it as the engine returned it."""
        ledger = self.ledger
        assert ledger is not None
        room = ledger.room()
        sent = len(ledger.ids)
        if room is not None and room <= 0:
            self.counters.no_room += 1
            ledger.context_full = True
            return {"role": "assistant", "content": None}, "length", (sent, 0)
        ids, lps, finish = await self._generate(list(ledger.ids), room)
        self.calls.append((list(ledger.ids), ids))
        text = ledger.add_turn(Generated("", ids, lps, finish))
        self.closed = bool(ids) and ids[-1] == self.template.end_id
        return read_reply(text, self.template.end, len(self.calls) - 1), finish or "stop", (sent, len(ids))

    async def _generate(
        self, prompt: list[int], room: int | None
    ) -> tuple[list[int], list[float] | None, str | None]:
        lim = self.limits
        cap = lim.turn_cap if room is None else min(lim.turn_cap, room)
        params = turn_params(lim.sampling_params, stop=(), max_tokens=cap)
        out = (await self.engine.generate(prompt, params)).outputs[0]
        ids = list(out.token_ids)
        return ids, sampled_logprobs(out, ids) if lim.want_logprobs else None, out.finish_reason

    def token_mismatches(self) -> int:
        """Tokens of the sample that differ from what the engine was sent and generated (0 when
        every turn's ids went into the ledger untouched)."""
        if self.ledger is None:
            return 0
        ids, bad = self.ledger.ids, 0
        for sent, out in self.calls:
            whole = sent + out
            seen = ids[: len(whole)]
            bad += sum(a != b for a, b in zip(seen, whole, strict=False)) + len(whole) - len(seen)
        return bad


def _completion(
    sid: str, n: int, model: Any, message: dict[str, Any], finish: str, usage: tuple[int, int]
) -> dict[str, Any]:
    """OpenAI's chat completion object for one reply."""
    reason = "length" if finish == "length" else ("tool_calls" if message.get("tool_calls") else "stop")
    prompt, completion = usage
    return {
        "id": f"chatcmpl-{sid}-{n}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model if isinstance(model, str) else "policy",
        "choices": [{"index": 0, "message": message, "finish_reason": reason, "logprobs": None}],
        "usage": {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
        },
    }
