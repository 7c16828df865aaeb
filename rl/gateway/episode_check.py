"""``train --check``'s gateway episode: the configured agent run through one full scripted episode
(a search, then an answer) with stand-ins for the engine and the retriever, under the run's
deadline, so a hang, a prompt that changes between calls, a rewritten history, or a conversation
the reward cannot read shows before GPU time, each in one line naming the cause."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

from parallelsearch.agents.protocol import SEARCH_TOOL, SEARCH_TOOL_NAME, Limits
from parallelsearch.rl.gateway.conversation import unreadable_tools
from parallelsearch.rl.gateway.template import ChatTemplate

QUERY = "scripted check query"
ANSWER = "scripted check answer"


def _generated(t: ChatTemplate, question: str, reply: dict[str, Any]) -> str:
    """The text the model writes for ``reply``, as the template renders it (its end token kept)."""
    user = {"role": "user", "content": question}
    prompt = t.render([user], [SEARCH_TOOL])
    whole = t.render([user, {"role": "assistant", **reply}], [SEARCH_TOOL], generation=False)
    return whole[len(prompt) : len(whole) - len(t.trailer)]


class ScriptedTurns:
    """An engine stand-in: a search call, then an answer, then the answer again."""

    def __init__(self, t: ChatTemplate, question: str):
        call = {
            "id": "call_0",
            "type": "function",
            "function": {"name": SEARCH_TOOL_NAME, "arguments": {"query": QUERY}},
        }
        texts = [
            _generated(t, question, {"content": "", "tool_calls": [call]}),
            _generated(t, question, {"content": ANSWER}),
        ]
        self.turns = [list(t.tokenizer(x, add_special_tokens=False)["input_ids"]) for x in texts]
        self.calls = 0

    async def generate(self, token_ids: list[int], params: Any) -> Any:
        ids = self.turns[min(self.calls, len(self.turns) - 1)]
        self.calls += 1
        return SimpleNamespace(outputs=[SimpleNamespace(token_ids=ids, logprobs=None, finish_reason="stop")])


def _passage(query: str) -> list[dict[str, str]]:
    return [{"title": "Scripted page", "text": f"A passage about {query}."}]


def run_scripted_episode(
    agent_cfg: Any, tokenizer: Any, question: str, limits: Limits
) -> tuple[Any, Any, Any]:
    """(session, final state or the exception, the executor) of one scripted episode."""
    from parallelsearch.agents.searchers.adapters import FunctionSearcher
    from parallelsearch.rl.gateway.executor import GatewayExecutor
    from parallelsearch.rl.gateway.factory import gateway_agent
    from parallelsearch.rl.gateway.transport import gateway_chat_model

    agent = gateway_agent(agent_cfg, gateway_chat_model(), FunctionSearcher(_passage))
    executor = GatewayExecutor(agent, timeout_s=agent_cfg.gateway_timeout_s, limits=limits)
    engine = ScriptedTurns(executor.template(tokenizer), question)
    session = executor.session(SimpleNamespace(max_tokens=None, logprobs=None), None, tokenizer, engine)

    async def episode() -> Any:
        try:
            return await executor.run_agent(session, question)
        except Exception as e:  # reported by the check, naming it
            return e

    return session, asyncio.run(episode()), executor


def check_gateway_episode(agent_cfg: Any, tokenizer: Any, question: str, limits: Limits) -> list[str]:
    """The check's lines: an ok line (and a warning line per fork kind), or a ValueError naming
    ``agent.factory`` (or the README agent) and what went wrong."""
    who = f"agent.factory {agent_cfg.factory!r}" if agent_cfg.factory else "the README chat agent"
    session, state, executor = run_scripted_episode(agent_cfg, tokenizer, question, limits)
    if session.stuck_reason is not None:
        raise ValueError(f"{who}: the scripted episode got stuck: {session.stuck_reason}")
    if isinstance(state, BaseException):
        raise ValueError(
            f"{who}: the scripted episode (search, then answer) raised {type(state).__name__}: {state}"
        )
    episode = executor.episode_of(session, state)
    missing = unreadable_tools(session.first_tools) if not state.get("trajectory") else None
    if missing is None and (len(episode.searches) != 1 or episode.answer != ANSWER):
        missing = (
            f"its conversation shows {len(episode.searches)} answered search(es) and answer {episode.answer!r} "
            f"where the scripted model searched {QUERY!r} once, then answered {ANSWER!r}"
        )
    if missing:
        raise ValueError(f"{who}: the reward cannot read what the agent did: {missing}")
    c = session.counters
    source = "its record" if state.get("trajectory") else "its conversation"
    lines = [
        f"gateway episode: {who} ran a scripted search, then an answer, in {c.requests} model calls; the "
        f"reward reads 1 search and the answer from {source}; {session.token_mismatches()} token mismatches"
    ]
    if c.drifts:
        lines.append(f"warning: {who}'s system prompt changes between model calls ({c.drifts} of {c.requests} calls, a "
                     "dynamic prompt): each sample trains on its turns after the last change, earlier turns are context")  # fmt: skip
    if c.forks > c.drifts:
        lines.append(f"warning: {who} rewrites the history it sends ({c.forks - c.drifts} fork(s) in one episode): each "
                     "sample trains on its turns after the last fork; the run stops past agent.gateway_max_fork_share")  # fmt: skip
    return lines
