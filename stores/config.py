"""Retrieval configuration: where passages are searched and how queries are embedded.

The app's settings (``PARALLELSEARCH_STORES``, ``PARALLELSEARCH_CHROMA_HOST``, ...) and the
OpenRLHF agent config extend it; only ``parallelsearch.graphs.factory`` turns it into stores and
searchers (docs/architecture.md, "Configuration").
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator
from pydantic_settings import NoDecode

from parallelsearch.stores.encoding.backend import EncoderBackend
from parallelsearch.stores.shard_spec import StoreSpec, find_store, group_store_parts, parse_store

DEFAULT_EMBEDDING_MODEL = "all-MiniLM-L6-v2"

# the environment gives "a,b" or '["a","b"]'; NoDecode lets the validator below read both
_StoreList = Annotated[list[str], NoDecode]


class RetrievalConfig(BaseModel):
    """Where to search: named Chroma stores (embedded or on a Chroma server) or a ``/retrieve`` URL."""

    model_config = ConfigDict(extra="forbid")

    retriever_url: str | None = Field(
        None, description="a Search-R1 /retrieve server to search instead of local stores"
    )
    retriever_api_key: SecretStr | None = Field(
        None,
        description="the key a keyed /retrieve server requires (`serve-retriever --api-key`), sent as "
        "X-API-Key; a SecretStr: repr, logs and JSON dumps show it as '**********'",
    )
    stores: _StoreList = Field(
        default_factory=list,
        description="store names to search; several = 'name: query' routing with rank fusion; "
        "NAME=SHARD,SHARD,... declares one store split over collections (SHARD = COLLECTION, "
        "COLLECTION@HOST:PORT or COLLECTION@FOLDER), searched as one by distance",
    )
    allow_partial: bool = Field(
        False,
        description="a sharded store answers from the shards that did answer when one fails, and says "
        "which are missing in the result (default: the query fails, naming the shard)",
    )
    shard_timeout_s: float = Field(
        10.0, gt=0, description="deadline of one query to all shards of a sharded store (retries included)"
    )
    store_kind: str = Field(
        "chroma",
        description="the store kind named stores are opened as: a key of graphs.factory.STORE_KINDS "
        "(`--store-kind`'s choices; chroma: embedded or a Chroma server, in chroma_path or at chroma_host; "
        "every other kind: in its folder, kind_folder())",
    )
    store_path: Path | None = Field(
        None,
        description="the folder of the configured store kind's stores, one folder each, for every kind "
        "but chroma (unset: <store_home>/<store kind>)",
    )
    store_home: Path | None = Field(
        None,
        description="where each store kind's folder is when store_path is unset (the app's settings: <home>)",
    )
    chroma_host: str | None = Field(None, description="Chroma server host; unset = embedded store")
    chroma_port: int = Field(8000, ge=1, le=65535, description="Chroma server port")
    chroma_path: Path | None = Field(
        None, description="embedded Chroma folder (the app's settings default it to <home>/chroma)"
    )
    embedding_model: str = Field(
        DEFAULT_EMBEDDING_MODEL, description="sentence-transformers model name or path"
    )
    encoder_backend: EncoderBackend = Field(
        "auto",
        description="query/passage encoder: torch, onnx (ONNX Runtime fp32, the same embeddings), "
        "onnx-int8 (dynamic int8, different embeddings); auto = the store's embeddings (a new store: "
        "fp32) on the fastest engine for the device: onnx on CPU, torch on a GPU",
    )
    model_cache_dir: Path | None = Field(
        None, description="where exported ONNX encoders are cached (the app's settings: <home>/models)"
    )
    query_prefix: str = Field("", description="prepended to every query (e.g. 'query: ' for E5)")
    passage_prefix: str = Field("", description="prepended to every passage (e.g. 'passage: ' for E5)")
    searcher: str | None = Field(
        None,
        description="the searcher kind, by name: a key of graphs.factory.SEARCHER_KINDS (`--help` of a "
        "command that searches lists them); unset = remote with retriever_url, else stores",
    )
    retriever_timeout_s: float = Field(30.0, gt=0, description="per-request timeout of /retrieve calls")
    retriever_ca_bundle: Path | None = Field(
        None,
        description="the CA certificates (PEM) an https:// retriever's certificate is verified against, "
        "e.g. a private CA's or a self-signed certificate (default: certifi's bundle, or SSL_CERT_FILE)",
    )
    store_lock_timeout_s: float = Field(
        600.0,
        ge=0,
        description="how long a writer (index) waits for another writer of the same embedded store; 0 = fail at once",
    )
    encoder_threads: int | None = Field(
        None,
        ge=1,
        description="threads of each local encoder call (unset = torch: every core, split between "
        "encoder workers; ONNX: 1); 1 when it shares the machine with other CPU-bound work such as a "
        "CPU vLLM engine",
    )
    encoder_workers: int | None = Field(
        None,
        ge=1,
        description="encoder threads: calls that may run at once, and how many parts one batch is split "
        "into (unset = torch: 1; ONNX: cores / encoder_threads); a /retrieve server searches that many "
        "batches at once (one more with ONNX)",
    )

    @field_validator("stores", mode="before")
    @classmethod
    def _store_list(cls, value: Any) -> Any:
        """Accept a list, a JSON list, or comma-separated names (``PARALLELSEARCH_STORES=a,b``)."""
        if isinstance(value, str):
            text = value.strip()
            if text.startswith("["):
                try:
                    return json.loads(text)
                except json.JSONDecodeError as e:
                    raise ValueError(f"stores: {text[:60]!r} is not a JSON list ({e.msg})") from e
            return group_store_parts([part.strip() for part in text.split(",") if part.strip()])
        return value

    @field_validator("retriever_api_key", mode="before")
    @classmethod
    def _key_text(cls, value: Any) -> Any:
        """An empty key is no key; a YAML number is its text. Nothing here raises: a validation error
        would print the key."""
        if isinstance(value, int | float) and not isinstance(value, bool):
            value = str(value)
        if isinstance(value, SecretStr):
            value = value.get_secret_value()
        if isinstance(value, str):
            return value.strip() or None
        return value

    @field_validator("stores")
    @classmethod
    def _declared_stores(cls, value: list[str]) -> list[str]:
        """Every entry parses: a bad sharded declaration is an error naming it, at start-up."""
        for entry in value:
            if "=" in entry:
                parse_store(entry)
        return value

    def store_spec(self, name: str) -> StoreSpec:
        """Store ``name``'s sharded declaration among ``stores``, else a plain store."""
        return find_store(self.stores, name)

    def searcher_kind(self) -> str:
        """Which searcher this configuration names (``searcher``, else what ``retriever_url`` or
        ``stores`` say); a clear error when it names none or two."""
        if self.searcher:
            return self.searcher
        if self.retriever_url and self.stores:
            raise ValueError(
                f"both a retriever URL ({self.retriever_url}) and stores ({', '.join(self.stores)}) are "
                "configured; set one (e.g. unset PARALLELSEARCH_RETRIEVER_URL or PARALLELSEARCH_STORES)"
            )
        if self.retriever_url:
            return "remote"
        if not self.stores:
            raise ValueError(
                "no store to search: pass --store NAME (or set PARALLELSEARCH_STORES) or a retriever URL "
                "(--retriever URL, PARALLELSEARCH_RETRIEVER_URL)"
            )
        return "stores"

    def location(self) -> str:
        """Where the stores live, as people read it: the Chroma server URL or the embedded folder."""
        if self.chroma_host:
            return f"http://{self.chroma_host}:{self.chroma_port}"
        return str(self.chroma_path) if self.chroma_path is not None else "(no store location)"

    def has_kind_folder(self) -> bool:
        return self.store_path is not None or self.store_home is not None

    def kind_folder(self) -> Path:
        """The folder of the configured kind's stores (a kind other than chroma): ``store_path``, else
        ``<store_home>/<store_kind>``; a store kind needs no setting of its own."""
        if self.store_path is not None:
            return self.store_path
        if self.store_home is None:
            raise ValueError(
                f"no folder for {self.store_kind} stores: set store_path (--store-path, PARALLELSEARCH_STORE_PATH)"
            )
        return self.store_home / self.store_kind

    def kind_location(self) -> str:
        """:meth:`kind_folder` as people read it, or what is missing."""
        return (
            str(self.kind_folder()) if self.has_kind_folder() else f"(no folder for {self.store_kind} stores)"
        )

    def retrieval(self) -> RetrievalConfig:
        """Just these fields, as a plain :class:`RetrievalConfig` (for models that extend it)."""
        return RetrievalConfig.model_validate(
            {name: getattr(self, name) for name in RetrievalConfig.model_fields}
        )
