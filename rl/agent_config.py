"""Configuration of the OpenRLHF agent executor, read from the file named by ``PARALLELSEARCH_AGENT_CONFIG``.

OpenRLHF constructs ``AgentExecutor()`` with no arguments inside every Ray rollout actor, so
the executor reads this file (YAML or JSON) and fails fast naming the variable, the file and
the field. The actors must share ONE retriever (a ``/retrieve`` server or a Chroma server);
an embedded store (``chroma_path``) is for single-process debugging only.
"""

from __future__ import annotations

import json
import os
import warnings
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from parallelsearch.agents.policies.config import Constrained, ConstrainedThinkChars
from parallelsearch.graphs.builders import SEARCHING_KINDS, check_graph_kind
from parallelsearch.graphs.config import GraphConfig
from parallelsearch.graphs.factory import make_searcher
from parallelsearch.rl.rewards import DEFAULT_TRAIN_MODE, RewardMode, check_reward_weights
from parallelsearch.rl.search_failures import DEFAULT_MAX_SHARE
from parallelsearch.stores.config import RetrievalConfig
from parallelsearch.stores.errors import ParallelSearchError, describe_validation_error

ENV_VAR = "PARALLELSEARCH_AGENT_CONFIG"
KEY_ENV_VAR = "PARALLELSEARCH_RETRIEVER_API_KEY"
#: where an unknown key's message sends the reader for the full list
LIST_KEYS = "see `parallelsearch train --list-keys`"


class AgentConfigError(ParallelSearchError, RuntimeError):
    """The executor's configuration is missing or invalid."""


class RewardConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    mode: RewardMode = Field(
        DEFAULT_TRAIN_MODE,
        description="paper-strict (decomposition paid only for splits the record shows searched), paper, "
        "dag, or official (the official code's numbers, for parity with released checkpoints)",
    )
    weights: dict[str, float] = Field(default_factory=dict, description="overrides of the mode's weights")
    cut_episodes: Literal["unshaped", "shaped"] = Field(
        "unshaped",
        description="an episode cut before its answer (context full, or its last turn at the token cap): "
        "unshaped = its positive shaped terms dropped; shaped = scored as any episode",
    )

    @field_validator("weights")
    @classmethod
    def _known_weights(cls, value: dict[str, float], info: ValidationInfo) -> dict[str, float]:
        """A typo'd weight fails when the config is built, not at the first scored episode."""
        if "mode" in info.data:
            check_reward_weights(info.data["mode"], value)
        return value


class SearchFailureLimits(BaseModel):
    """When the executor stops a run whose searches fail (instead of training on ``Search failed`` text)."""

    model_config = ConfigDict(extra="forbid")

    first_episodes: int = Field(
        32, ge=0, description="any failed search in the actor's first N episodes stops the run"
    )
    max_share: float = Field(
        DEFAULT_MAX_SHARE,
        ge=0,
        le=1,
        description="after those, stop when more than this share of searches failed",
    )
    probe: bool = Field(True, description="send one probe query when the executor starts")


class AgentConfig(RetrievalConfig):
    """What one rollout actor needs: where to search (the retrieval fields the app's settings
    share), the graph's knobs, the reward.

    ``store: NAME`` (one store) is accepted as an alias of ``stores: [NAME]``.
    """

    model_config = ConfigDict(extra="forbid")

    graph: str = Field(
        "parallel", description="parallel (ParallelSearch), sequential (Search-R1) or dag (#k plans)"
    )
    graph_config: GraphConfig = Field(
        default_factory=GraphConfig,
        validate_default=True,
        description="the graph's knobs; observations render titles as the official code does unless set",
    )
    reward: RewardConfig = Field(default_factory=RewardConfig)
    retriever_fingerprint: str | None = Field(
        None,
        description="the corpus fingerprint the retriever's /health must report (train --check prints it); "
        "with retriever_url, embedding_model and query_prefix set here are checked against /health too",
    )
    search_failures: SearchFailureLimits = Field(default_factory=SearchFailureLimits)
    encoder_threads: int | None = Field(
        1,
        ge=1,
        description="threads of each call of an embedded store's query encoder: 1 by default, because a "
        "rollout actor shares its node with vLLM engines and other actors (unset = torch: every core, "
        "ONNX: 1)",
    )
    encoder_workers: int | None = Field(
        1,
        ge=1,
        description="encoder calls at once: 1 by default, so the encoder takes one core of the node "
        "(unset = the engine's default: ONNX fills the cores)",
    )
    constrained: Constrained = False
    constrained_think_chars: ConstrainedThinkChars = 600
    mode: Literal["text", "gateway"] = Field(
        "text",
        description="text = the text environment (the parity reference); gateway = the chat agent itself "
        "through a per-episode OpenAI session gateway speaking token ids (docs/training.md)",
    )
    factory: str | None = Field(
        None,
        description="gateway mode: MODULE:FUNCTION whose FUNCTION(model, searcher) returns the compiled agent "
        "(unset = the README chat agent with this graph and graph_config)",
    )
    gateway_sampling: Literal["override", "refuse"] = Field(
        "override",
        description="gateway mode: a client's temperature/top_p/seed/max_tokens/stop/logit_bias are "
        "overridden by the trainer's and counted (override), or refused with a 400 naming the field",
    )
    health_log: str | None = Field(
        None,
        description="a folder every rollout actor appends one health record per episode to (a file each); "
        "`parallelsearch train-health FOLDER` prints the steps and their alarms (a path every node writes)",
    )
    max_observation_tokens: int | None = Field(
        None,
        ge=1,
        description="cut each observation to this many tokens before the next turn reads it, as the official "
        "code's max_obs_length (unset: no cap)",
    )

    @model_validator(mode="before")
    @classmethod
    def _store_alias(cls, data: Any) -> Any:
        if isinstance(data, dict) and "store" in data:
            data = dict(data)
            store = data.pop("store")
            if data.get("stores"):
                raise ValueError("give 'stores' or its alias 'store', not both")
            data["stores"] = [store] if isinstance(store, str) else store
        return data

    @model_validator(mode="before")
    @classmethod
    def _key_from_environment(cls, data: Any) -> Any:
        """The retriever's key from ``PARALLELSEARCH_RETRIEVER_API_KEY`` when the file gives none."""
        if isinstance(data, dict) and not data.get("retriever_api_key") and os.environ.get(KEY_ENV_VAR):
            data = {**data, "retriever_api_key": os.environ[KEY_ENV_VAR]}
        return data

    @field_validator("graph")
    @classmethod
    def _searching_graph(cls, value: str) -> str:
        return check_graph_kind(value, SEARCHING_KINDS)

    @field_validator("graph_config")
    @classmethod
    def _official_observations(cls, value: GraphConfig) -> GraphConfig:
        """Training sees the official observation format (quoted titles) unless the config says otherwise:
        a policy trained here then reads released checkpoints' format, and vice versa."""
        return value if value.observation_titles else value.updated(observation_titles="official")

    gateway_transport: Literal["inprocess", "loopback"] = Field(
        "inprocess",
        description="gateway mode: how the agent reaches its session: inprocess (an httpx transport, no "
        "socket) or loopback (an HTTP server on 127.0.0.1 per actor, for agents that need a socket)",
    )

    gateway_timeout_s: float = Field(
        600.0,
        gt=0,
        description="gateway mode: each model call's deadline, and the longest an episode may wait between "
        "calls; a stuck episode fails its sample with a log line naming the step",
    )
    gateway_max_stuck: int = Field(
        2, ge=0, description="gateway mode: the run stops once more episodes than this got stuck (per actor)"
    )
    gateway_max_fork_share: float = Field(
        0.2,
        ge=0,
        le=1,
        description="gateway mode: the run stops once more than this share of episodes forked (the agent "
        "rewrote the history it sends; a dynamic system prompt is not counted), after 20 episodes",
    )

    @field_validator("factory")
    @classmethod
    def _factory_form(cls, value: str | None) -> str | None:
        from parallelsearch.rl.gateway.factory import check_factory_spec

        return None if value is None else check_factory_spec(value)

    @model_validator(mode="after")
    def _gateway_mode(self) -> AgentConfig:
        """Gateway mode scores the chat agent's record and samples freely: no text-reading reward,
        no grammar; a factory without gateway mode would be silently unused."""
        if self.mode == "text":
            if self.factory is not None:
                raise ValueError("agent.factory is used in gateway mode only: set agent.mode=gateway")
            return self
        if self.reward.mode == "official":
            raise ValueError(
                "agent.mode=gateway scores the chat agent's record; reward.mode 'official' reads the tags "
                "text: set agent.reward.mode=paper-strict (or paper, dag)"
            )
        if self.constrained:
            raise ValueError(
                "agent.constrained is a text-mode grammar; gateway mode samples the agent's turns freely"
            )
        return self

    @model_validator(mode="after")
    def _one_searcher(self) -> AgentConfig:
        kinds = [k for k in ("retriever_url", "chroma_host", "chroma_path") if getattr(self, k)]
        if len(kinds) != 1:
            raise ValueError(
                "set exactly one of retriever_url, chroma_host (+ store) or chroma_path (+ store); "
                f"got {kinds or 'none'}"
            )
        if kinds[0] != "retriever_url" and not self.stores:
            raise ValueError(f"{kinds[0]} needs 'store' (the collection name)")
        return self

    def file_dump(self) -> dict[str, Any]:
        """What the file every actor reads holds: never the retriever's key (actors read
        ``PARALLELSEARCH_RETRIEVER_API_KEY``); with ``retriever_url``, the encoder settings only when
        set, since they are then the retriever's identity to check, not settings of this process."""
        exclude = {"retriever_api_key"}
        if self.retriever_url:
            exclude |= {
                f
                for f in ("embedding_model", "query_prefix", "passage_prefix")
                if f not in self.model_fields_set
            }
        return self.model_dump(mode="json", exclude_none=True, exclude=exclude)

    def make_searcher(self) -> Any:
        """The shared retriever this configuration names (built by the one factory)."""
        if self.chroma_path is not None:
            warnings.warn(
                "the agent executor uses an embedded Chroma store; Ray actors on several processes or "
                "machines need a shared Chroma server or /retrieve server instead",
                stacklevel=2,
            )
        return make_searcher(self.retrieval())

    def env_graph(self) -> Any:
        """The text environment this configuration describes: its searcher, graph, reward and knobs
        (what the executor runs and ``rollout --config`` replays)."""
        from parallelsearch.rl.env import EnvGraph

        return EnvGraph(
            self.make_searcher(),
            graph=self.graph,
            reward_mode=self.reward.mode,
            reward_weights=self.reward.weights,
            config=self.graph_config,
        )


def read_config_file(path: str | Path) -> dict[str, Any]:
    """A YAML or JSON mapping from ``path``; errors name the file."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError as e:
        raise AgentConfigError(f"config file {p} does not exist") from e
    except OSError as e:
        raise AgentConfigError(f"config file {p} cannot be read: {e}") from e
    try:
        if p.suffix.lower() == ".json":
            data = json.loads(text)
        else:
            import yaml

            data = yaml.safe_load(text)
    except Exception as e:  # noqa: BLE001 - any parse error becomes one clear message
        raise AgentConfigError(f"config file {p} is not valid {p.suffix.lstrip('.') or 'YAML'}: {e}") from e
    if not isinstance(data, dict):
        raise AgentConfigError(f"config file {p} must hold a mapping, got {type(data).__name__}")
    return data


def load_agent_config(path: str | Path | None = None) -> AgentConfig:
    """The executor's config from ``path`` or from the file named by ``PARALLELSEARCH_AGENT_CONFIG``."""
    path = path or os.environ.get(ENV_VAR)
    if not path:
        raise AgentConfigError(
            f"{ENV_VAR} is not set: point it at the agent config file (YAML/JSON) in every Ray actor's "
            'environment, e.g. ray job submit --runtime-env-json \'{"env_vars": {"' + ENV_VAR + "\": ...}}'"
        )
    data = read_config_file(path)
    try:
        return AgentConfig(**data)
    except ValidationError as e:
        raise AgentConfigError(
            f"agent config {path} ({ENV_VAR}) is invalid: {describe_validation_error(e, AgentConfig, keys_hint=LIST_KEYS)}"
        ) from e
