"""One OpenRLHF sample in gateway mode: the user's compiled agent runs the episode with the
gateway's chat model, its session records the engine's ids, and the graph's record is scored
as in text mode. Same ``execute`` signature as :class:`~parallelsearch.rl.executor.EpisodeExecutor`;
no OpenRLHF import here."""

from __future__ import annotations

import asyncio
import logging
import uuid
from typing import Any

from parallelsearch.agents.protocol import Limits
from parallelsearch.graphs.record import Episode
from parallelsearch.rl.episode import EpisodeRun, decode_tokens
from parallelsearch.rl.executor import (
    SampleExecutor,
    SampleRequest,
    episode_reward,
    extra_logs,
    logged_health,
    question_from,
)
from parallelsearch.rl.gateway.conversation import conversation_episode
from parallelsearch.rl.gateway.guard import EpisodeStuck, GatewayGuard, within_deadline
from parallelsearch.rl.gateway.http import SessionRegistry
from parallelsearch.rl.gateway.sampling import ClientSampling
from parallelsearch.rl.gateway.session import GatewaySession, SessionLimits
from parallelsearch.rl.gateway.template import ChatTemplate
from parallelsearch.rl.gateway.transport import current_session
from parallelsearch.rl.rewards import check_reward_mode, parse_label, score_episode
from parallelsearch.rl.search_failures import SearchFailureGuard
from parallelsearch.stores.text import scrub_text

log = logging.getLogger(__name__)


def failed_closed_ranges(ranges: list[tuple[int, int]], length: int) -> list[tuple[int, int]]:
    """The action span a failed-closed sample keeps: its last token alone. OpenRLHF averages each
    sample's KL and log-prob difference over its action mask (``masked_mean``, ``dim=-1``): an
    empty mask divides 0 by 0, so the step's logged ``kl`` (and an adaptive KL controller fed with
    it) would be NaN. One token keeps the divisor at 1; its loss weighs one token of the step's."""
    end = ranges[-1][1] if ranges else length
    return [(end - 1, end)] if end > 1 else []


class GatewayExecutor(SampleExecutor):
    """Runs OpenRLHF samples as episodes of a compiled chat agent whose model is the gateway's
    (``agent`` was built by the factory with :func:`gateway_chat_model`)."""

    def __init__(
        self,
        agent: Any,
        *,
        max_new_tokens_per_turn: int = 500,
        reward_mode: str = "paper",
        reward_weights: dict[str, float] | None = None,
        client_sampling: ClientSampling = "override",
        cut_episodes: str = "unshaped",
        search_guard: SearchFailureGuard | None = None,
        registry: SessionRegistry | None = None,
        health_log: str | None = None,
        timeout_s: float = 600.0,
        guard: GatewayGuard | None = None,
        limits: Limits | None = None,
    ) -> None:
        self.agent = agent
        self.limits = limits or Limits()  # what a turn may ask for, when the conversation is read
        self.timeout_s = timeout_s  # each model call's deadline, and the longest an episode may idle
        self.guard = guard
        self.health_log = health_log
        self.registry = registry  # the loopback server's sessions (None: in-process only)
        self.max_new_tokens_per_turn = max_new_tokens_per_turn
        self.reward_mode = check_reward_mode(reward_mode)
        self.reward_weights = dict(reward_weights or {})
        self.client_sampling = client_sampling
        self.cut_episodes = cut_episodes
        self.search_guard = search_guard
        self._templates: dict[int, ChatTemplate] = {}
        self.last_session: GatewaySession | None = None  # the latest episode's (tests, the smoke)

    def template(self, tokenizer: Any) -> ChatTemplate:
        """The tokenizer's template, read and checked once per tokenizer (as ``train --check``
        does: a template that is not append-only for tool turns stops the run at its first
        episode instead of training on tokens a served model would not see)."""
        key = id(tokenizer)
        if key not in self._templates:
            from parallelsearch.rl.gateway.template_check import check_gateway_template

            check_gateway_template(tokenizer)
            self._templates[key] = ChatTemplate(tokenizer)
        return self._templates[key]

    def session(self, sampling_params: Any, max_length: int, tokenizer: Any, engine: Any) -> GatewaySession:
        """A new episode's session under the trainer's sampling params and caps."""
        outer = getattr(sampling_params, "max_tokens", None)
        cap = min(self.max_new_tokens_per_turn, int(outer)) if outer else self.max_new_tokens_per_turn
        limits = SessionLimits(
            sampling_params,
            turn_cap=cap,
            max_length=max_length,
            want_logprobs=getattr(sampling_params, "logprobs", None) is not None,
            client_sampling=self.client_sampling,
            call_timeout_s=self.timeout_s,
        )
        return GatewaySession(self.template(tokenizer), engine, limits)

    async def run_agent(self, session: GatewaySession, question: str) -> dict[str, Any]:
        """The agent's final state for one question, every model call answered by ``session``;
        :class:`EpisodeStuck` when it idles past the deadline."""
        token = current_session.set(session)
        session.loop = asyncio.get_running_loop()
        if self.registry is not None:
            self.registry.open(session)
        try:
            config = {"configurable": {"thread_id": f"gateway-{uuid.uuid4().hex}"}}
            work = self.agent.ainvoke({"messages": [("user", question)]}, config)
            return dict(await within_deadline(work, session, self.timeout_s))
        finally:
            current_session.reset(token)
            if self.registry is not None:
                self.registry.close(session)

    async def episode(self, r: SampleRequest) -> dict[str, Any]:
        """One episode; OpenRLHF's sample dict. The prompt gives the question only: the agent
        writes its own messages, and the sample's tokens start with their render."""
        lab = parse_label(r.label)
        clean, replaced = scrub_text(r.prompt) if isinstance(r.prompt, str) else (r.prompt, 0)
        session = self.session(r.sampling_params, r.max_length, r.tokenizer, r.engine)
        self.last_session = session
        question = question_from(clean, lab)
        try:
            state = await self.run_agent(session, question)
        except Exception as e:
            if session.stuck_reason is None and not isinstance(e, EpisodeStuck):
                raise
            log.warning("gateway episode stuck: %s; its sample fails closed", session.stuck_reason)
            state = {}
            if session.ledger is None:  # stuck before its first model call: the question alone
                session.start_from([{"role": "user", "content": question}])
        else:
            if self.search_guard is not None:
                self.search_guard.record(state)
        sample = self.sample(session, state, r.prompt, r.label, lab, replaced)
        if self.guard is not None:
            self.guard.record(session.counters)
        return sample

    def episode_of(self, session: GatewaySession, state: dict[str, Any]) -> Episode:
        """What the agent did: the project graph's record when its state holds one, else the
        conversation the agent held through the session (any LangChain/LangGraph agent)."""
        if state.get("trajectory"):
            return Episode.from_state(state)
        return conversation_episode(session.held, session.answered, self.limits)

    def sample(
        self,
        session: GatewaySession,
        state: dict[str, Any],
        prompt: Any,
        label: Any,
        lab: dict,
        replaced: int,
    ) -> dict[str, Any]:
        """OpenRLHF's sample: the ledger's ids and spans, the record's reward and logs, and the
        gateway's counters; a forked episode fails closed (no span in the loss, reward 0)."""
        ledger = session.ledger
        if ledger is None:
            raise RuntimeError("the agent finished without calling its model: there is nothing to train")
        episode = self.episode_of(session, state)
        text = decode_tokens(ledger.tokenizer, ledger.ids)
        breakdown = score_episode(episode, lab, self.reward_mode, text=text, **self.reward_weights)
        run = EpisodeRun(episode, state, prompt, text, [], ledger, breakdown)
        reward, breakdown = episode_reward(run, lab, self.cut_episodes)
        logs = extra_logs(run, breakdown, replaced)
        import torch

        gateway = session.counters.logs(ledger.retokenized, session.token_mismatches(), session.failed)
        logs.update({k: torch.tensor(v) for k, v in gateway.items()})
        failed = session.failed
        result = {
            "prompt": prompt,
            "label": label,
            "images": None,
            "mm_train_inputs": None,
            "reward": 0.0 if failed else float(reward),
            "scores": 0.0 if failed else float(breakdown.outcome),
            "observation_tokens": ledger.ids,
            "action_ranges": failed_closed_ranges(ledger.ranges, len(ledger.ids))
            if failed
            else ledger.ranges,
            "rollout_log_probs": [lp or 0.0 for lp in ledger.logprobs]
            if session.limits.want_logprobs
            else None,
            "truncated": ledger.truncated,
            "extra_logs": logs,
        }
        return logged_health(self.health_log, result)
