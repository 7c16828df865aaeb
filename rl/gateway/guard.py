"""The gateway's run-level limits: an episode that waits past its deadline fails that sample (one
log line naming the step), and the run stops with the reason once stuck episodes pass a count or
forks pass a share of the episodes, instead of hanging or training on far less than it seems."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import Any, TypeVar

from parallelsearch.stores.errors import ParallelSearchError

log = logging.getLogger(__name__)
T = TypeVar("T")


class EpisodeStuck(RuntimeError):
    """An episode made no progress within its deadline (the sample fails closed)."""


class GatewayRunError(ParallelSearchError, RuntimeError):
    """Too many stuck or forked episodes: the run stops with the reason and the setting to change."""


async def within_deadline(work: Awaitable[T], session: Any, timeout_s: float) -> T:
    """``work`` (the agent's episode), cancelled once ``session`` has been idle ``timeout_s``
    seconds (no model call started or ended); a model call itself is bounded by the same
    deadline in the transport. Raises :class:`EpisodeStuck` naming the step it waited at."""
    task = asyncio.ensure_future(work)
    try:
        while True:
            idle = time.monotonic() - session.last_activity
            left = timeout_s - idle if not session.in_call else timeout_s + 5.0
            done, _ = await asyncio.wait({task}, timeout=max(left, 0.0))
            if done:
                return task.result()
            if session.stuck_reason is not None or (
                not session.in_call and time.monotonic() - session.last_activity >= timeout_s
            ):
                why = session.stuck_reason or f"no model call for {timeout_s:g} s {session.where()}"
                session.mark_stuck(why)
                raise EpisodeStuck(why)
    finally:
        if not task.done():
            task.cancel()
            await asyncio.wait({task}, timeout=5.0)


@dataclass
class GatewayGuard:
    """Per-actor counts of finished episodes, stuck ones and forked ones; :meth:`record` raises
    :class:`GatewayRunError` past ``max_stuck`` stuck episodes, or once at least ``min_episodes``
    ran and more than ``max_fork_share`` of them forked other than by a dynamic system prompt."""

    max_stuck: int = 2
    max_fork_share: float = 0.2
    min_episodes: int = 20
    episodes: int = 0
    stuck: int = 0
    forked: int = 0
    stopped: str | None = None

    def record(self, counters: Any) -> None:
        """Count one finished sample's session counters; raise when the run must stop."""
        if self.stopped:
            raise GatewayRunError(self.stopped)
        self.episodes += 1
        self.stuck += int(counters.stuck)
        self.forked += int(counters.forks > counters.drifts)
        if self.stuck > self.max_stuck:
            self.stopped = (
                f"{self.stuck} gateway episodes got stuck (> agent.gateway_max_stuck={self.max_stuck}): an "
                "agent that waits without a bound (a sync hook, a tool, the engine) would idle the cluster; "
                "see the 'gateway episode stuck' log lines for the step"
            )
        elif self.episodes >= self.min_episodes and self.forked > self.max_fork_share * self.episodes:
            self.stopped = (
                f"{self.forked} of {self.episodes} gateway episodes forked ({self.forked / self.episodes:.0%} > "
                f"agent.gateway_max_fork_share={self.max_fork_share:g}): the agent rewrites the history it "
                "sends, so each sample trains on its last turns only; run `train --check` to see the fork, "
                "or raise the share to accept it"
            )
        if self.stopped:
            raise GatewayRunError(self.stopped)
