"""Simulated model time for evaluations without a model: the oracle answers at once, so
``eval --turn-delay-ms`` / ``--resolver-delay-ms`` give each policy turn and each ``#k`` resolver
call a fixed cost, and latency comparisons count turns and calls as a real model would."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import Any

from parallelsearch.agents.policies.base import TurnRequest, TurnResult
from parallelsearch.agents.resolvers import ParentResult, Resolver


class DelayedPolicy:
    """A policy whose every turn first waits ``delay_s`` (a stand-in for generation time)."""

    def __init__(self, policy: Any, delay_s: float):
        self.inner = policy
        self.delay_s = delay_s
        self.name = getattr(policy, "name", type(policy).__name__)

    async def agenerate(self, request: TurnRequest) -> TurnResult:
        await asyncio.sleep(self.delay_s)
        return await self.inner.agenerate(request)


class DelayedResolver:
    """A resolver whose every call first waits ``delay_s`` (a stand-in for a short model call, as
    the policy resolver makes)."""

    def __init__(self, resolver: Resolver, delay_s: float) -> None:
        self.inner = resolver
        self.delay_s = delay_s
        self.name = getattr(resolver, "name", type(resolver).__name__)

    def __call__(self, sub_query: str, parents: Sequence[ParentResult]) -> str:
        time.sleep(self.delay_s)
        return self.inner(sub_query, parents)

    async def aresolve(self, sub_query: str, parents: Sequence[ParentResult]) -> str:
        await asyncio.sleep(self.delay_s)
        return await self.inner.aresolve(sub_query, parents)
