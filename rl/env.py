"""The training environment: the compiled graph, driven one policy turn at a time.

The planner node runs the :class:`ExternalPolicy`, which pauses the graph with LangGraph
``interrupt`` and the whole turn request; :meth:`SearchEnv.step` resumes it with
``Command(resume=...)``, so search, join, routing and counting are the graph's own code, as in
serving. ``EnvGraph`` is built once per process and shared; each episode is a cheap
:class:`SearchEnv` on its own checkpoint thread. The environment scores nothing: whoever drives
it scores the finished episode's record once (``parallelsearch.rl.episode``).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

from typing_extensions import Unpack

from parallelsearch.agents.policies.external import ExternalPolicy
from parallelsearch.agents.protocol import TurnRequest
from parallelsearch.graphs.builders import SEARCHING_KINDS, build_graph, check_graph_kind
from parallelsearch.graphs.config import GraphConfig, GraphOptions
from parallelsearch.graphs.record import Episode
from parallelsearch.rl.rewards import (
    RewardBreakdown,
    check_reward_mode,
    check_reward_protocol,
    check_reward_weights,
    parse_label,
    score_episode,
)


@dataclass
class StepResult:
    """What one ``step`` returns: the text to append after the action, and whether it ended."""

    observation: str
    done: bool
    next_final: bool = False  # the next turn is the answer-only turn
    output: dict[str, Any] = field(default_factory=dict)  # the graph's final state, when done

    @property
    def episode(self) -> Episode:
        """The finished episode's record (empty before it is done)."""
        return Episode.from_state(self.output)


class EnvGraph:
    """One compiled graph with the external policy and an in-memory checkpointer, shared by
    episodes; the reward mode and weights its episodes are scored with."""

    def __init__(
        self,
        searcher: Any,
        *,
        graph: str = "parallel",
        reward_mode: str = "paper",
        reward_weights: dict[str, float] | None = None,
        config: GraphConfig | None = None,
        **options: Unpack[GraphOptions],
    ):
        from langgraph.checkpoint.memory import InMemorySaver

        self.kind = check_graph_kind(graph, SEARCHING_KINDS)
        self.reward_mode = check_reward_mode(reward_mode)
        self.reward_weights = dict(reward_weights or {})
        check_reward_weights(self.reward_mode, self.reward_weights)
        self.checkpointer = InMemorySaver()
        self.config = (config or GraphConfig()).updated(**options)
        # the trainer's policy writes text: training's "tools" is the tool calls' text form
        chosen = self.config.protocol
        self.protocol = {"tools": "tool_text", "auto": "tags"}.get(chosen, chosen)
        check_reward_protocol(self.reward_mode, self.protocol)
        self.graph = build_graph(
            graph,
            ExternalPolicy(),
            searcher,
            checkpointer=self.checkpointer,
            config=self.config.model_copy(update={"protocol": self.protocol}),
        )

    def new_episode(self) -> SearchEnv:
        return SearchEnv(self)

    def score(self, episode: Episode, label: Any, text: str | None = None) -> RewardBreakdown:
        """The episode's reward in this environment's mode (``text``: the decoded episode, which
        only the official mode reads)."""
        return score_episode(episode, label, self.reward_mode, text=text, **self.reward_weights)


def _pending_turn(snapshot: Any) -> TurnRequest | None:
    """The turn request the paused graph waits on, if it waits on one."""
    for intr in getattr(snapshot, "interrupts", ()) or ():
        if isinstance(intr.value, dict) and "transcript" in intr.value:
            return TurnRequest.from_payload(intr.value)
    return None


class SearchEnv:
    """One episode: ``reset(question, label)`` -> prompt; ``step(action_text)`` -> :class:`StepResult`."""

    def __init__(self, env_graph: EnvGraph):
        self._g = env_graph
        self._config: dict[str, Any] | None = None
        self._transcript = ""
        self._prompt = ""
        self.done = False
        self.turn: TurnRequest | None = None  # the pending turn the graph asked for
        self.last_output: dict[str, Any] = {}  # the graph's final state, once done

    @property
    def transcript(self) -> str:
        return self._transcript

    @property
    def prompt(self) -> str:
        return self._prompt

    async def _advance(self, payload: Any) -> dict[str, Any] | None:
        graph = self._g.graph
        await graph.ainvoke(payload, self._config)
        snapshot = await graph.aget_state(self._config)
        turn = _pending_turn(snapshot)
        if turn is None and snapshot.next:
            raise RuntimeError(f"the graph stopped at {snapshot.next} without asking for a policy turn")
        self.turn = turn
        return None if turn is not None else dict(snapshot.values)

    async def reset(self, question: str, label: Any = None, metadata: dict[str, Any] | None = None) -> str:
        """Start an episode; returns the prompt (the transcript before the first turn).
        ``label`` (golden answers, type/split) and ``metadata`` become the episode's metadata,
        which the graph's policies may read (the oracle does)."""
        if not isinstance(question, str) or not question.strip():
            raise ValueError("reset needs a non-empty question string")
        self.close()
        self._config = {"configurable": {"thread_id": f"env-{uuid.uuid4().hex}"}}
        self.done, self.last_output = False, {}
        lab = parse_label(label) if label is not None else {}
        # the question's own metadata wins: a label carries a reward's digest of it (hops' refs only)
        meta = {**{k: v for k, v in lab.items() if k != "question"}, **(metadata or {})}
        final = await self._advance({"question": question, "metadata": meta})
        if final is not None or self.turn is None:
            raise RuntimeError("the graph ended before the first policy turn")
        self._prompt = self._transcript = self.turn.transcript
        return self._prompt

    async def step(
        self, action_text: str, token_ids: list[int] | None = None, prompt_tokens: int | None = None
    ) -> StepResult:
        """Hand the policy's turn to the graph; returns the observation to append after it. A
        trainer that keeps tokens passes the turn's ids and the context it was generated on, so
        the graph counts ``tokens_in``/``tokens_out`` as it does when serving."""
        if self.done:
            raise RuntimeError("the episode is over; call reset() to start another")
        if self._config is None:
            raise RuntimeError("call reset() before step()")
        if not isinstance(action_text, str):
            raise ValueError(f"action must be text, got {type(action_text).__name__}")
        from langgraph.types import Command

        before = self._transcript + action_text
        resume: dict[str, Any] = {"text": action_text}
        if token_ids is not None:
            resume.update(token_ids=list(token_ids), prompt_tokens=prompt_tokens)
        final_state = await self._advance(Command(resume=resume))
        after = final_state["transcript"] if final_state is not None else self.turn.transcript  # type: ignore[union-attr]  # LangGraph types the state snapshot's values loosely
        if not after.startswith(before):
            raise RuntimeError("the graph's transcript does not continue the action text (state was altered)")
        self._transcript = after
        observation = after[len(before) :]
        if final_state is None:
            return StepResult(observation, False, next_final=bool(self.turn and self.turn.final))
        self.done, self.last_output = True, final_state
        self.close()
        return StepResult(observation, True, output=final_state)

    async def values(self) -> dict[str, Any]:
        """The graph's state so far (counts of searches, failures, turns); empty before ``reset``."""
        if self._config is None:
            return {}
        snapshot = await self._g.graph.aget_state(self._config)
        return dict(snapshot.values)

    def close(self) -> None:
        """Drop the episode's checkpoints (also for an abandoned episode)."""
        if self._config is not None:
            self._g.checkpointer.delete_thread(self._config["configurable"]["thread_id"])
            self._config = None
