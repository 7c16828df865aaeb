"""Settings: environment (``PARALLELSEARCH_*``), an optional YAML/TOML config file, defaults.

The config file is ``$PARALLELSEARCH_CONFIG`` when set, else ``./parallelsearch.yaml`` or
``./parallelsearch.toml`` when present. This module is the one place that says where
stores live: ``home``/chroma (``$PARALLELSEARCH_HOME``; default ``./.parallelsearch`` when
that folder exists, else the user's data dir, ``$XDG_DATA_HOME/parallelsearch``).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from pydantic import Field
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
    YamlConfigSettingsSource,
)


def default_home() -> Path:
    local = Path.cwd() / ".parallelsearch"
    if local.is_dir():
        return local
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "parallelsearch"


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


class Settings(BaseSettings):
    """Every tunable the CLI, server and library read; arguments override these."""

    model_config = SettingsConfigDict(env_prefix="PARALLELSEARCH_", extra="ignore")

    home: Path = Field(default_factory=default_home, description="root folder for stores and caches")
    chroma_host: str | None = Field(None, description="Chroma server host; unset = embedded store under home")
    chroma_port: int = 8000
    embedding_model: str = "all-MiniLM-L6-v2"
    query_prefix: str = ""
    passage_prefix: str = ""
    embed_batch_size: int = 64
    policy: str = "oracle"
    openai_base_url: str = "http://127.0.0.1:8000/v1"
    openai_api_key: str | None = None
    retriever_url: str | None = None
    stores: list[str] = Field(default_factory=list, description="stores the server and CLI search by default")
    graph: dict[str, Any] = Field(
        default_factory=dict, description="graph config overrides (top_k, max_turns, ...)"
    )
    request_timeout_s: float = 30.0
    server_api_key: str | None = None
    server_max_question_chars: int = 2000
    server_max_batch: int = 32
    server_max_concurrency: int = 64

    @property
    def chroma_path(self) -> Path:
        return Path(self.home) / "chroma"

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
    """Fresh settings (env and file are re-read so tests and long-lived servers see changes)."""
    return Settings(**{k: v for k, v in overrides.items() if v is not None})
