"""One episode's session behind ``/v1/chat/completions``: the token ledger the sample is made
of, and the message history every request is checked against.

The first request is rendered whole with the chat template; each reply is the engine's own ids
and log-probs, appended to the ledger untouched; each later request must repeat the history
message by message and may only add tool, user or system messages, which are rendered as a
suffix (:class:`ChatTemplate`). A repeated request (a client's retry) gets the cached reply. Any
other request is a fork: it is answered from a fresh render, so the agent goes on, but the
sample fails closed (no loss on it) and the fork is counted.
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

    def logs(self, retokenized: int, mismatches: int, failed: bool) -> dict[str, float]:
        return {
            "gateway_requests": float(self.requests),
            "gateway_forks": float(self.forks),
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
        self.failed = False  # a fork happened: the sample carries no loss
        self.calls: list[tuple[list[int], list[int]]] = []  # (ids sent, ids generated) per engine call
        self._lock = asyncio.Lock()

    async def complete(self, body: Any) -> dict[str, Any]:
        """The OpenAI chat completion for ``body``; a client mistake raises a 4xx GatewayError."""
        if not isinstance(body, dict):
            raise GatewayError(400, "the request body must be a JSON object")
        for name in trainer_owned(body, self.limits.client_sampling):
            self.counters.overridden[name] = self.counters.overridden.get(name, 0) + 1
        messages = body.get("messages")
        norm = canonical_all(messages)
        tools = body.get("tools") or None
        async with self._lock:
            self.counters.requests += 1
            if self.last_request is not None and norm == self.last_request and self.last_reply is not None:
                self.counters.retries += 1
                return self.last_reply
            message, finish, usage = await self._turn(messages, norm, tools)
            reply = _completion(self.id, self.counters.requests, body.get("model"), message, finish, usage)
            self.last_request, self.last_reply = norm, reply
            self.history = [*norm, *canonical_all([message])]
            return reply

    async def _turn(
        self, messages: list[Any], norm: list[dict[str, Any]], tools: Any
    ) -> tuple[dict[str, Any], str, tuple[int, int]]:
        key = json.dumps(tools, sort_keys=True)
        if self.ledger is None:
            self.tools_key = key
            prompt = self.template.render([template_message(m) for m in messages], tools)
            lim = self.limits
            self.ledger = TokenLedger(self.template.tokenizer, prompt, lim.max_length, turn_cap=lim.turn_cap)
        elif not self._continues(norm, key):
            self.counters.forks += 1  # counted once: later requests continue the forked history
            self.failed, self.tools_key = True, key
            return await self._forked_turn(messages, tools)
        elif self.failed:
            return await self._forked_turn(messages, tools)
        else:
            new = [template_message(m) for m in messages[len(self.history) :]]
            self.ledger.add_observation(self.template.suffix(new, tools, closed=self.closed))
        return await self._ledger_turn()

    def _continues(self, norm: list[dict[str, Any]], tools_key: str) -> bool:
        """The request repeats the history and adds only tool, user or system messages."""
        n = len(self.history)
        if tools_key != self.tools_key or len(norm) <= n or norm[:n] != self.history:
            return False
        return all(m["role"] in NEW_ROLES for m in norm[n:])

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

    async def _forked_turn(
        self, messages: list[Any], tools: Any
    ) -> tuple[dict[str, Any], str, tuple[int, int]]:
        """A fork's reply, generated from a fresh render of the request (kept out of the sample)."""
        text = self.template.render([template_message(m) for m in messages], tools)
        prompt = list(self.template.tokenizer(text, add_special_tokens=False)["input_ids"])
        room = None if self.limits.max_length is None else self.limits.max_length - len(prompt)
        if room is not None and room <= 0:
            return {"role": "assistant", "content": None}, "length", (len(prompt), 0)
        ids, _, finish = await self._generate(prompt, room)
        out = self.template.tokenizer.decode(
            ids, skip_special_tokens=False, clean_up_tokenization_spaces=False
        )
        return read_reply(out, self.template.end, len(self.calls)), finish or "stop", (len(prompt), len(ids))

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
