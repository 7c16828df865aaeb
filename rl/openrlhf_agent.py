"""OpenRLHF agent module: pass this file's path as ``--train.agent_func_path``.

OpenRLHF (0.11.2) loads it in every Ray rollout actor and calls ``AgentExecutor()`` with no
arguments, so the configuration comes from the file named by ``PARALLELSEARCH_AGENT_CONFIG``
(:mod:`parallelsearch.rl.agent_config`). A missing or invalid file, a retriever that serves
another model or corpus than the config names, wants a key the actor lacks, or does not answer
a probe query, stops the actor at construction with a clear message.
"""

from __future__ import annotations

import logging
from typing import Any

from openrlhf.utils.agent import AgentExecutorBase

from parallelsearch.rl.agent_config import AgentConfig, load_agent_config
from parallelsearch.rl.executor import EpisodeExecutor, SampleRequest
from parallelsearch.rl.gateway.executor import GatewayExecutor
from parallelsearch.rl.preflight import executor_startup, retriever_name
from parallelsearch.rl.search_failures import SearchFailureGuard

log = logging.getLogger(__name__)


def gateway_executor(cfg: AgentConfig, searcher: Any, guard: SearchFailureGuard) -> GatewayExecutor:
    """Gateway mode: the configured factory's agent with the gateway's chat model."""
    from parallelsearch.rl.gateway.conversation import reader_limits
    from parallelsearch.rl.gateway.factory import gateway_agent
    from parallelsearch.rl.gateway.guard import GatewayGuard
    from parallelsearch.rl.gateway.transport import gateway_chat_model

    registry = None
    model = gateway_chat_model()
    if cfg.gateway_transport == "loopback":
        from parallelsearch.rl.gateway.http import LoopbackGateway, SessionRegistry, loopback_chat_model

        registry = SessionRegistry()
        server = LoopbackGateway(registry).start()
        log.info("gateway sessions served at %s/sessions/<id>/v1", server.url)
        model = loopback_chat_model(server.url)
    return GatewayExecutor(
        gateway_agent(cfg, model, searcher),
        registry=registry,
        max_new_tokens_per_turn=cfg.graph_config.max_new_tokens,
        reward_mode=cfg.reward.mode,
        reward_weights=cfg.reward.weights,
        client_sampling=cfg.gateway_sampling,
        cut_episodes=cfg.reward.cut_episodes,
        search_guard=guard,
        health_log=cfg.health_log,
        timeout_s=cfg.gateway_timeout_s,
        guard=GatewayGuard(max_stuck=cfg.gateway_max_stuck, max_fork_share=cfg.gateway_max_fork_share),
        limits=reader_limits(cfg),
    )


class AgentExecutor(EpisodeExecutor, AgentExecutorBase):
    """Runs each sample as one ParallelSearch episode over the compiled graph (``execute`` is
    :meth:`EpisodeExecutor.episode`, with the agent config's knobs), or in gateway mode as one
    episode of the configured chat agent (:class:`GatewayExecutor`)."""

    def __init__(self) -> None:
        cfg = self.config = load_agent_config()
        limits = cfg.search_failures
        if limits.probe:
            for line in executor_startup(cfg):
                log.info("start-up check: %s", line)
        guard = SearchFailureGuard(
            first_episodes=limits.first_episodes, max_share=limits.max_share, source=retriever_name(cfg)
        )
        self.gateway = gateway_executor(cfg, cfg.make_searcher(), guard) if cfg.mode == "gateway" else None
        if self.gateway is not None:
            return
        env_graph = cfg.env_graph()
        super().__init__(
            env_graph,
            max_new_tokens_per_turn=cfg.graph_config.max_new_tokens,
            constrained=cfg.constrained,
            think_chars=cfg.constrained_think_chars,
            cut_episodes=cfg.reward.cut_episodes,
            health_log=cfg.health_log,
            max_observation_tokens=cfg.max_observation_tokens,
            search_guard=guard,
        )

    async def episode(self, r: SampleRequest) -> dict[str, Any]:
        """One sample, in the configured mode."""
        if self.gateway is not None:
            return await self.gateway.episode(r)
        return await super().episode(r)
