"""Settings: a CLI flag > environment (``PARALLELSEARCH_*``) > a YAML/TOML config file > the config
models' defaults (docs/architecture.md, "Configuration"). It is the one place that says where stores
live: under ``home``."""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import Field, field_validator, model_validator
from pydantic_settings import (
    BaseSettings,
    NoDecode,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
    YamlConfigSettingsSource,
)

from parallelsearch.agents.policies.config import PolicyConfig
from parallelsearch.graphs.config import (
    MAX_SUBQUERIES_LIMIT,
    MAX_TOP_K,
    MAX_TURNS_LIMIT,
    OPERATOR_CAPS,
    GraphConfig,
)
from parallelsearch.stores.config import RetrievalConfig
from parallelsearch.stores.home import default_home

if TYPE_CHECKING:
    from parallelsearch.graphs.factory import GraphParts
    from parallelsearch.stores.http.api_key import KeyFailures
    from parallelsearch.stores.http.read_limits import ReadLimits

MultitaskStrategy = Literal["enqueue", "reject"]
#: where a server keeps its threads (``serving/checkpointers.py`` opens each kind)
CheckpointerKind = Literal["none", "memory", "sqlite", "postgres"]
_HostList = Annotated[list[str], NoDecode]


def _config_file() -> Path | None:
    explicit = os.environ.get("PARALLELSEARCH_CONFIG")
    if explicit:
        p = Path(explicit)
        if not p.is_file():
            raise FileNotFoundError(f"PARALLELSEARCH_CONFIG={explicit!r} does not name a file")
        return p
    for name in ("parallelsearch.yaml", "parallelsearch.yml", "parallelsearch.toml"):
        if (Path.cwd() / name).is_file():
            return Path.cwd() / name
    return None


class Settings(RetrievalConfig, PolicyConfig, BaseSettings):
    """Every tunable the CLI, server and library read; explicit arguments override these."""

    model_config = SettingsConfigDict(env_prefix="PARALLELSEARCH_", env_nested_delimiter="__", extra="ignore")

    home: Path = Field(default_factory=default_home, description="root folder for stores and caches")
    graph_config: GraphConfig = Field(
        default_factory=GraphConfig, description="graph knobs (top_k, max_turns, ...); unset = defaults"
    )
    embed_batch_size: int = Field(32, ge=1, description="passages per encoder forward pass when indexing")
    server_api_key: str | None = Field(
        None, repr=False, description="the key `serve` requires on every route but /health; blank = none"
    )
    server_key_failure_limit: int = Field(
        10,
        ge=0,
        description="failed key checks one client address may make within server_key_failure_window_s "
        "before every request from it gets 429 until the window passes (0 = no limit)",
    )
    server_key_failure_window_s: float = Field(
        60.0, gt=0, description="the window of server_key_failure_limit, in seconds"
    )
    server_key_failure_prefix_limit: int | None = Field(
        None,
        ge=0,
        description="failed key checks one network (/24 of IPv4, /64 of IPv6) may make within the window "
        "(None = server_key_failure_limit): many addresses of one host do not multiply the guesses",
    )
    server_key_failure_total_limit: int | None = Field(
        None,
        ge=0,
        description="failed key checks all clients together may make within the window before every "
        "request without the right key gets 429 (None = 10 x server_key_failure_limit)",
    )
    server_allowed_hosts: _HostList | None = Field(
        None,
        description="Host header names the servers answer to (a DNS-rebinding page sends its own); "
        "None = any name, except that `serve` and `serve-retriever` bound to loopback answer only "
        "localhost, 127.0.0.1 and ::1",
    )
    server_ssl_certfile: Path | None = Field(
        None, description="serve HTTPS with this certificate (PEM; --ssl-certfile), with server_ssl_keyfile"
    )
    server_ssl_keyfile: Path | None = Field(
        None, description="the certificate's private key (PEM; --ssl-keyfile)"
    )
    server_multitask_strategy: MultitaskStrategy = Field(
        "enqueue",
        description="a run on a thread that already has one in flight: enqueue = wait for it (at most "
        "server_queue_timeout_s, then 429), reject = 409 at once",
    )
    server_max_top_k: int = Field(
        MAX_TOP_K, ge=1, le=MAX_TOP_K, description="the largest top_k a request may ask for (configurable)"
    )
    server_max_subqueries: int = Field(
        MAX_SUBQUERIES_LIMIT,
        ge=1,
        le=MAX_SUBQUERIES_LIMIT,
        description="the largest max_subqueries a request may ask for (configurable)",
    )
    server_max_turns: int = Field(
        MAX_TURNS_LIMIT, ge=0, le=MAX_TURNS_LIMIT, description="the largest max_turns a request may ask for"
    )
    server_max_response_bytes: int | None = Field(
        10_000_000,
        ge=1,
        description="the largest response a graph call may get (an invoke past it is a 422, a stream "
        "ends with an error event); None = no limit",
    )
    server_max_messages: int = Field(
        1000, ge=1, description="most messages one graph input may carry (413): each is parsed and kept"
    )
    server_max_history_messages: int | None = Field(
        100,
        ge=0,
        description="the most earlier messages of a thread or input a served graph's planner sees: the "
        "served graphs' max_history_messages when graph_config sets none, and the largest a request may "
        "ask for (None = no bound)",
    )
    server_forwarded_allow_ips: _HostList | None = Field(
        None,
        description="addresses of proxies whose X-Forwarded-For / X-Forwarded-Proto the servers believe "
        "(uvicorn's forwarded_allow_ips; '*' = any); None = none: the client address is the peer's",
    )
    server_keep_alive_s: float = Field(
        30.0,
        gt=0,
        description="seconds an idle kept-alive connection stays open (uvicorn timeout_keep_alive)",
    )
    server_head_timeout_s: float = Field(
        20.0, gt=0, description="seconds a client has to send a request's head (slowloris: closed with a 408)"
    )
    server_body_timeout_s: float = Field(
        60.0, gt=0, description="seconds a client has to send a request's body after its head (408)"
    )
    server_send_timeout_s: float = Field(
        30.0,
        gt=0,
        description="seconds a client that stops reading may leave a response unread in a full send "
        "buffer before the connection is closed and the response freed (nginx's send_timeout)",
    )
    server_max_head_bytes: int = Field(
        64 * 1024, ge=1024, description="largest request line and headers together (431)"
    )
    server_max_question_chars: int = Field(2000, ge=1, description="longest question a graph route accepts")
    server_max_batch: int = Field(
        256, ge=1, description="most inputs in one /batch request (RemoteRunnable.batch sends all at once)"
    )
    server_max_concurrency: int = Field(
        64, ge=1, description="graph runs in flight; a batch holds one slot per input (at most all)"
    )
    server_queue_size: int = Field(
        512,
        ge=0,
        description="requests that may wait for a slot beyond the in-flight cap (0 = refuse at once)",
    )
    server_queue_timeout_s: float = Field(
        60.0, ge=0, description="longest a request waits in the queue before a 429 with Retry-After"
    )
    server_max_body_bytes: int = Field(
        1_000_000, ge=1, description="largest request body, checked before parsing (413)"
    )
    server_max_json_depth: int = Field(
        64, ge=1, description="deepest nesting of a JSON request body, checked before parsing (400)"
    )
    server_checkpointer: CheckpointerKind = Field(
        "sqlite",
        description="where `parallelsearch serve` keeps threads (requests with a thread_id): "
        "sqlite = an embedded file (one process), postgres = shared by several processes, "
        "memory = until the process ends, none = no threads",
    )
    server_checkpoint_url: str | None = Field(
        None,
        repr=False,  # a Postgres URL may hold a password
        description="sqlite: the database file (default <home>/threads.sqlite); "
        "postgres: a URL, postgresql://user:password@host:5432/db",
    )

    def checkpoint_target(self) -> str | None:
        """The checkpointer's file or URL: the SQLite default lives under ``home``."""
        if self.server_checkpoint_url:
            return self.server_checkpoint_url
        if self.server_checkpointer == "sqlite":
            return str(Path(self.home) / "threads.sqlite")
        return None

    def read_limits(self) -> ReadLimits:
        """The servers' read, header and proxy limits (:class:`ReadLimits`), from these settings."""
        from parallelsearch.stores.http.read_limits import ReadLimits

        return ReadLimits(
            keep_alive_s=self.server_keep_alive_s,
            head_timeout_s=self.server_head_timeout_s,
            body_timeout_s=self.server_body_timeout_s,
            send_timeout_s=self.server_send_timeout_s,
            max_head_bytes=self.server_max_head_bytes,
            forwarded_allow_ips=tuple(self.server_forwarded_allow_ips or ()),
        )

    def key_failures(self) -> KeyFailures:
        """The servers' count of failed key checks (:class:`KeyFailures`), from these settings."""
        from parallelsearch.stores.http.api_key import KeyFailures

        return KeyFailures(
            self.server_key_failure_limit,
            self.server_key_failure_window_s,
            prefix_limit=self.server_key_failure_prefix_limit,
            total_limit=self.server_key_failure_total_limit,
        )

    def served(self) -> Settings:
        """These settings as a server runs them: the served graphs' history bounded by
        ``server_max_history_messages`` unless ``graph_config`` bounds it itself."""
        cap = self.server_max_history_messages
        if cap is None or self.graph_config.max_history_messages is not None:
            return self
        return self.model_copy(update={"graph_config": self.graph_config.updated(max_history_messages=cap)})

    def graph_parts(
        self, kinds: Iterable[str], *, policy: Any = None, searcher: Any = None, defer_stores: bool = False
    ) -> GraphParts:
        """The parts of graphs of ``kinds`` as these settings say (built by the factory): the one
        path from settings to graphs for the CLI, the server, ``langgraph_app`` and eval.
        ``policy`` and ``searcher``: objects already built (tests, notebooks) used instead;
        ``defer_stores``: the stores open at the first search (``langgraph_app``)."""
        from parallelsearch.graphs.factory import make_parts

        return make_parts(
            kinds,
            policy=self.policy_config() if policy is None else policy,
            retrieval=self.retrieval() if searcher is None else searcher,
            graph_config=self.graph_config,
            defer_stores=defer_stores,
        )

    @model_validator(mode="before")
    @classmethod
    def _no_removed_graph_spelling(cls, data: Any) -> Any:
        """The graph knobs are ``graph_config``: a ``graph`` key or ``PARALLELSEARCH_GRAPH*`` variable
        (the spelling removed in 0.4) is refused by name instead of being ignored."""
        stale = [
            k for k in os.environ if k == "PARALLELSEARCH_GRAPH" or k.startswith("PARALLELSEARCH_GRAPH__")
        ]
        if isinstance(data, dict) and isinstance(data.get("graph"), dict):
            stale.append("graph (a settings or config-file key)")
        if stale:
            raise ValueError(
                f"{', '.join(sorted(stale))}: the graph knobs are graph_config now "
                "(PARALLELSEARCH_GRAPH_CONFIG__TOP_K=5, graph_config: {top_k: 5}); 'graph' names a graph kind"
            )
        return data

    @model_validator(mode="before")
    @classmethod
    def _no_faiss_path(cls, data: Any) -> Any:
        """Every store kind but Chroma keeps its stores under ``store_path``: a ``faiss_path`` key or
        ``PARALLELSEARCH_FAISS_PATH`` would otherwise be dropped without a word, and the stores looked
        for in ``<home>/faiss``."""
        stale = ["PARALLELSEARCH_FAISS_PATH"] if "PARALLELSEARCH_FAISS_PATH" in os.environ else []
        if isinstance(data, dict) and "faiss_path" in data:
            stale.append("faiss_path (a settings or config-file key)")
        if stale:
            raise ValueError(
                f"{', '.join(stale)}: the FAISS stores' folder is store_path now "
                "(PARALLELSEARCH_STORE_PATH, --store-path; unset: <home>/faiss)"
            )
        return data

    @model_validator(mode="before")
    @classmethod
    def _openai_key_fallback(cls, data: Any) -> Any:
        """``OPENAI_API_KEY`` is the key when ``PARALLELSEARCH_OPENAI_API_KEY`` is not set."""
        if isinstance(data, dict) and not data.get("openai_api_key") and os.environ.get("OPENAI_API_KEY"):
            data = {**data, "openai_api_key": os.environ["OPENAI_API_KEY"]}
        return data

    @field_validator("server_api_key", mode="before")
    @classmethod
    def _server_key_text(cls, value: Any) -> Any:
        """A blank key is no key (a key of spaces once let an empty header in); a YAML number is its
        text. Nothing here raises: a validation error would print the key."""
        if isinstance(value, int | float) and not isinstance(value, bool):
            value = str(value)
        return value.strip() or None if isinstance(value, str) else value

    @field_validator("server_allowed_hosts", "server_forwarded_allow_ips", mode="before")
    @classmethod
    def _host_list(cls, value: Any) -> Any:
        """A list, or ``PARALLELSEARCH_SERVER_ALLOWED_HOSTS=a.example,b.example``."""
        if isinstance(value, str):
            return [part.strip() for part in value.split(",") if part.strip()]
        return value

    @model_validator(mode="after")
    def _graph_within_caps(self) -> Settings:
        """The server's own graph knobs must fit the caps it puts on requests."""
        g = self.graph_config
        for knob, cap in OPERATOR_CAPS.items():
            # None: the knob unbounded (served() bounds it by the cap) or no cap set
            if (
                getattr(g, knob) is not None
                and getattr(self, cap) is not None
                and getattr(g, knob) > getattr(self, cap)
            ):
                raise ValueError(
                    f"graph_config.{knob}={getattr(g, knob)} exceeds {cap}={getattr(self, cap)}; "
                    f"lower one or raise the other"
                )
        if (self.server_ssl_certfile is None) != (self.server_ssl_keyfile is None):
            raise ValueError("server_ssl_certfile and server_ssl_keyfile go together: set both or neither")
        return self

    @model_validator(mode="after")
    def _embedded_store_under_home(self) -> Settings:
        if self.chroma_path is None:
            self.chroma_path = Path(self.home) / "chroma"
        if self.store_home is None:
            self.store_home = Path(self.home)
        if self.model_cache_dir is None:
            self.model_cache_dir = Path(self.home) / "models"
        return self

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        sources: list[PydanticBaseSettingsSource] = [init_settings, env_settings]
        cfg = _config_file()
        if cfg is not None:
            if cfg.suffix == ".toml":
                sources.append(TomlConfigSettingsSource(settings_cls, toml_file=cfg))
            else:
                sources.append(YamlConfigSettingsSource(settings_cls, yaml_file=cfg))
        return tuple(sources)


def get_settings(**overrides: Any) -> Settings:
    """Fresh settings (env and file re-read, so tests and long-lived servers see changes), with
    ``overrides`` (e.g. CLI flags) over them; ``None`` means "not given"."""
    return Settings(**{k: v for k, v in overrides.items() if v is not None})
