"""OpenRLHF agent module: pass this file's path as ``--train.agent_func_path``.

OpenRLHF (0.11.2) loads it in every Ray rollout actor and calls ``AgentExecutor()`` with no
arguments, so the configuration comes from the file named by ``PARALLELSEARCH_AGENT_CONFIG``
(:mod:`parallelsearch.rl.agent_config`). A missing or invalid file, or a retriever that does
not answer a probe query, stops the actor at construction with a clear message.
"""

from __future__ import annotations

from typing import Any

from openrlhf.utils.agent import AgentExecutorBase

from parallelsearch.rl.agent_config import load_agent_config
from parallelsearch.rl.env import EnvGraph
from parallelsearch.rl.executor import execute_episode
from parallelsearch.rl.preflight import probe_retriever, retriever_name
from parallelsearch.rl.search_failures import SearchFailureGuard


class AgentExecutor(AgentExecutorBase):
    """Runs each sample as one ParallelSearch episode over the compiled graph."""

    def __init__(self) -> None:
        cfg = self.config = load_agent_config()
        limits = cfg.search_failures
        if limits.probe:
            probe_retriever(cfg)
        self.search_guard = SearchFailureGuard(
            first_episodes=limits.first_episodes, max_share=limits.max_share, source=retriever_name(cfg)
        )
        self.env_graph = EnvGraph(
            cfg.make_searcher(),
            graph=cfg.graph,
            reward_mode=cfg.reward.mode,
            reward_weights=cfg.reward.weights,
            config=cfg.graph_config,
        )

    async def execute(
        self,
        prompt: str,
        label: Any,
        sampling_params: Any,
        max_length: int,
        hf_tokenizer: Any,
        llm_engine: Any,
        images: Any = None,
    ) -> dict[str, Any]:
        """OpenRLHF's per-sample call, as one episode of :func:`execute_episode` with the config's knobs."""
        if images:
            raise ValueError("the ParallelSearch agent is text-only; this sample carries images")
        sample = (prompt, label, sampling_params, max_length, hf_tokenizer, llm_engine)
        return await execute_episode(
            self.env_graph,
            *sample,
            max_new_tokens_per_turn=self.config.graph_config.max_new_tokens,
            constrained=self.config.constrained,
            think_chars=self.config.constrained_think_chars,
            search_guard=self.search_guard,
        )
