"""OpenRLHF agent module: pass this file's path as ``--train.agent_func_path``.

OpenRLHF (0.11.2) loads it in every Ray rollout actor and calls ``AgentExecutor()`` with no
arguments, so the configuration comes from the file named by ``PARALLELSEARCH_AGENT_CONFIG``
(:mod:`parallelsearch.rl.agent_config`). A missing or invalid file, a retriever that serves
another model or corpus than the config names, wants a key the actor lacks, or does not answer
a probe query, stops the actor at construction with a clear message.
"""

from __future__ import annotations

import logging

from openrlhf.utils.agent import AgentExecutorBase

from parallelsearch.rl.agent_config import load_agent_config
from parallelsearch.rl.env import EnvGraph
from parallelsearch.rl.executor import EpisodeExecutor
from parallelsearch.rl.preflight import executor_startup, retriever_name
from parallelsearch.rl.search_failures import SearchFailureGuard

log = logging.getLogger(__name__)


class AgentExecutor(EpisodeExecutor, AgentExecutorBase):
    """Runs each sample as one ParallelSearch episode over the compiled graph (``execute`` is
    :meth:`EpisodeExecutor.execute`, with the agent config's knobs)."""

    def __init__(self) -> None:
        cfg = self.config = load_agent_config()
        limits = cfg.search_failures
        if limits.probe:
            for line in executor_startup(cfg):
                log.info("start-up check: %s", line)
        env_graph = EnvGraph(
            cfg.make_searcher(),
            graph=cfg.graph,
            reward_mode=cfg.reward.mode,
            reward_weights=cfg.reward.weights,
            config=cfg.graph_config,
        )
        super().__init__(
            env_graph,
            max_new_tokens_per_turn=cfg.graph_config.max_new_tokens,
            constrained=cfg.constrained,
            think_chars=cfg.constrained_think_chars,
            cut_episodes=cfg.reward.cut_episodes,
            max_observation_tokens=cfg.max_observation_tokens,
            search_guard=SearchFailureGuard(
                first_episodes=limits.first_episodes, max_share=limits.max_share, source=retriever_name(cfg)
            ),
        )
