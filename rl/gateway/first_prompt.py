"""The gateway agent's first prompt as the engine is sent it: the configured agent (its factory,
system prompt, middleware and tools) run on a question with a stand-in engine that ends every
turn at once, so ``train --check`` counts the context budget with the prompt gateway mode trains
on, not the text environment's."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from types import SimpleNamespace
from typing import Any


class EndsAtOnce:
    """A stand-in for the engine: every turn is the end-of-turn token alone (no search runs)."""

    def __init__(self, end_id: int):
        self.end_id = end_id

    async def generate(self, token_ids: list[int], params: Any) -> Any:
        out = SimpleNamespace(token_ids=[self.end_id], logprobs=None, finish_reason="stop")
        return SimpleNamespace(outputs=[out])


def _no_search(query: str) -> list[Any]:
    raise RuntimeError(f"the first-prompt probe ran a search ({query!r}): its engine never calls one")


def first_prompt_tokens(agent_cfg: Any, tokenizer: Any, questions: Sequence[str]) -> list[int]:
    """Per question, the tokens of the agent's first model call as the gateway renders it (chat
    template, tools), without a retriever or an engine."""
    from parallelsearch.agents.searchers.adapters import FunctionSearcher
    from parallelsearch.rl.gateway.executor import GatewayExecutor
    from parallelsearch.rl.gateway.factory import gateway_agent
    from parallelsearch.rl.gateway.transport import gateway_chat_model

    agent = gateway_agent(agent_cfg, gateway_chat_model(), FunctionSearcher(_no_search))
    executor = GatewayExecutor(agent, max_new_tokens_per_turn=1)
    engine = EndsAtOnce(executor.template(tokenizer).end_id)
    params = SimpleNamespace(max_tokens=1, logprobs=None)

    async def count(question: str) -> int:
        session = executor.session(params, None, tokenizer, engine)
        await executor.run_agent(session, question)
        assert session.ledger is not None
        return session.ledger.prompt_len

    async def every() -> list[int]:
        return [await count(q) for q in questions]

    return asyncio.run(every())
