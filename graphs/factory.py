"""Configuration -> runtime objects: embedders, stores, searchers, policies and graph parts.

The one place that turns the configuration models (``RetrievalConfig``, ``PolicyConfig``,
``GraphConfig``) into the objects that run, for every entry point (docs/architecture.md,
"Configuration"). It sits in ``graphs`` because it needs every layer below and ``rl`` imports it.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from parallelsearch.agents.policies.base import Policy
from parallelsearch.agents.policies.config import PolicyConfig
from parallelsearch.agents.policies.spec import policy_from_spec
from parallelsearch.agents.searchers.backends import MultiStoreSearcher, RemoteSearcher, StoreSearcher
from parallelsearch.agents.searchers.base import Searcher
from parallelsearch.agents.searchers.deferred import DeferredSearcher
from parallelsearch.graphs.builders import SearchGraph, build_graph, check_graph_kind
from parallelsearch.graphs.config import GraphConfig
from parallelsearch.stores.chroma_store import (
    ChromaStore,
    is_chroma_error,
    make_client,
    require_stores,
    store_backend,
    validate_store_name,
)
from parallelsearch.stores.config import RetrievalConfig
from parallelsearch.stores.encoding.embedder import Embedder, make_embedder
from parallelsearch.stores.errors import check_choice
from parallelsearch.stores.faiss_store import (
    check_faiss_store,
    describe_faiss_stores,
    open_faiss_store,
    writing_faiss_store,
)
from parallelsearch.stores.http.retrieval_client import RetrieverClient
from parallelsearch.stores.isolated_read import (
    DEFAULT_READ_TIMEOUT_S,
    StoreLocation,
    check_store,
    list_stores,
)
from parallelsearch.stores.passage_store import PassageStore, dropped_unless_written
from parallelsearch.stores.redact import redact_url
from parallelsearch.stores.safe_files import refuse_links_under
from parallelsearch.stores.shard_spec import StoreSpec
from parallelsearch.stores.store_check import StoreCheck
from parallelsearch.stores.store_files import (
    StoreDamagedError,
    inspect_store,
    read_only_reason,
    repair_hint,
    require_sound_store,
    sqlite_store_names,
)
from parallelsearch.stores.store_lock import StoreWriteLock
from parallelsearch.stores.write_errors import write_failure

if TYPE_CHECKING:
    from parallelsearch.stores.sharded_store import ShardedStore

log = logging.getLogger(__name__)


def store_embedder(cfg: RetrievalConfig, client: Any, name: str) -> Embedder:
    """The encoder for store ``name`` (:func:`~parallelsearch.stores.encoding.embedder.make_embedder`):
    with ``auto``, the engine for the embedding family the store records (a new store: fp32)."""
    recorded = store_backend(client, name) if cfg.encoder_backend == "auto" else None
    try:
        return make_embedder(cfg, recorded=recorded)
    except ValueError as e:
        raise ValueError(f"store {name!r} at {cfg.location()}: {e}") from e


def make_chroma_client(cfg: RetrievalConfig) -> Any:
    """A Chroma server client when ``chroma_host`` is set, else the embedded client at ``chroma_path``."""
    where = store_location(cfg)
    return make_client(path=where.path, host=where.host, port=where.port)


def reading_client(cfg: RetrievalConfig, names: list[str]) -> tuple[Any, dict[str, list[str]]]:
    """The client to read stores ``names`` with: each embedded store's files are looked at first
    (``stores/store_files.py``: a store that does not add up, or is read-only here, is refused
    naming it before Chroma touches its files); Chroma's own failure to open is named too. Also
    the ids of passages the file check sampled, per store (the open check reads their vectors)."""
    where = store_location(cfg)
    samples: dict[str, list[str]] = {}
    if not where.host:
        assert where.path is not None
        for name in names:
            samples[name] = require_sound_store(where.path, name).sample_ids
    try:
        client = make_client(path=where.path, host=where.host, port=where.port, create=False)
    except Exception as e:  # noqa: BLE001 - Chroma's error classes differ by client and version
        if where.host or not is_chroma_error(e):
            raise
        raise StoreDamagedError(
            f"the stores at {cfg.location()} cannot be opened ({type(e).__name__}: {e}"[:400] + ")"
        ) from e
    require_stores(client, names, cfg.location())  # a typo fails before an encoder loads
    return client, samples


def make_store(
    cfg: RetrievalConfig,
    name: str,
    *,
    create: bool = False,
    embedder: Embedder | None = None,
    hnsw: dict[str, Any] | None = None,
    client: Any = None,
    sample_ids: list[str] | None = None,
) -> ChromaStore:
    """The store ``name`` where ``cfg`` says stores live; a missing one is an error unless ``create``.
    ``hnsw``: Chroma's HNSW parameters (``stores/chroma_store.py``); ``client``: one already open.
    Opened for reading (not ``create``), its files are checked first and Chroma reads it once
    (:meth:`ChromaStore.probe`: ``sample_ids``' vectors, else the first passages', compared with
    their checksums), so a store that cannot answer fails here, naming it."""
    if client is None and create:
        client = make_chroma_client(cfg)
    elif client is None:
        client, samples = reading_client(cfg, [name])
        sample_ids = samples.get(name)
    store = ChromaStore(
        name,
        client=client,
        embedder=embedder or store_embedder(cfg, client, name),
        create=create,
        location=cfg.location(),
        hnsw=hnsw,
    )
    if not create:
        store.probe(sample_ids)
    return store


def make_sharded_store(
    cfg: RetrievalConfig, spec: StoreSpec, *, embedder: Embedder | None = None
) -> ShardedStore:
    """The sharded store ``spec`` declares, every shard opened and checked against the others; one
    encoder for all: ``embedder``, else the one the first shard records (``auto``)."""
    from parallelsearch.stores.sharded_store import ShardedStore, open_shards

    def embedder_for(client: Any, collection: str) -> Embedder:
        return embedder or store_embedder(cfg, client, collection)

    shards = open_shards(
        spec,
        embedder_for,
        host=cfg.chroma_host,
        port=cfg.chroma_port,
        path=cfg.chroma_path,
        timeout_s=cfg.shard_timeout_s,
    )
    return ShardedStore(
        spec.name,
        shards,
        shards[0][1].embedder,
        allow_partial=cfg.allow_partial,
        timeout_s=cfg.shard_timeout_s,
    )


def _open_chroma(cfg: RetrievalConfig, name: str) -> ChromaStore | ShardedStore:
    """Chroma store ``name`` for reading: a sharded one when ``cfg.stores`` declares it so (or ``name``
    is a ``NAME=SHARD,...`` declaration), else :func:`make_store`."""
    spec = cfg.store_spec(name)
    return make_sharded_store(cfg, spec) if spec.sharded else make_store(cfg, spec.name)


def make_named_store(cfg: RetrievalConfig, name: str) -> PassageStore | ShardedStore:
    """The store ``name`` for reading, of the configured kind (``STORE_KINDS``)."""
    return store_kind(cfg).open(cfg, name)


def writing_store(cfg: RetrievalConfig, name: str, **options: Any) -> contextlib.AbstractContextManager[Any]:
    """The store ``name`` opened (created when missing) for writing, one writer at a time, of the
    configured kind; ``options``: :func:`_writing_chroma_store`'s keywords."""
    return store_kind(cfg).open_for_writing(cfg, name, **options)


def describe_stores(
    cfg: RetrievalConfig, *, timeout_s: float = DEFAULT_READ_TIMEOUT_S
) -> list[dict[str, Any]]:
    """Every store of the configured kind where ``cfg`` says they live (``stores``)."""
    return store_kind(cfg).describe(cfg, timeout_s=timeout_s)


def check_named_store(
    cfg: RetrievalConfig, name: str, *, timeout_s: float = DEFAULT_READ_TIMEOUT_S, progress: bool = False
) -> StoreCheck:
    """Every vector of store ``name`` read back (``stores --check``, ``index --verify``)."""
    return store_kind(cfg).check(cfg, name, timeout_s=timeout_s, progress=progress)


def stores_location(cfg: RetrievalConfig) -> str:
    """Where stores of the configured kind live, as people read it."""
    return store_kind(cfg).location(cfg)


@contextlib.contextmanager
def _writing_chroma_store(
    cfg: RetrievalConfig,
    name: str,
    *,
    lock_timeout_s: float | None = None,
    on_wait: Callable[[str], None] | None = None,
    embedder: Embedder | None = None,
    embedder_for: Callable[[str | None], Embedder] | None = None,
    hnsw: dict[str, Any] | None = None,
) -> Iterator[ChromaStore]:
    """The store ``name`` opened (created when missing) for writing, one writer at a time.

    An embedded store is locked before its client is opened, so this process loads the index the
    previous writer left (a Chroma server serialises writes itself); a store this call created is
    dropped again when the block fails before adding anything. ``embedder_for(recorded)`` builds the
    encoder inside the lock, once an existing store's recorded backend is known (``auto`` only).
    """
    validate_store_name(name)
    where = store_location(cfg)
    lock: contextlib.AbstractContextManager[Any] = contextlib.nullcontext()
    if not where.host and where.path is not None:  # an embedded store: one writer at a time
        timeout = cfg.store_lock_timeout_s if lock_timeout_s is None else lock_timeout_s
        lock = StoreWriteLock(where.path, name, timeout_s=timeout, on_wait=on_wait)
    with lock:
        if not where.host and where.path is not None:
            refuse_links_under(where.path, f"a file of store {name!r}")  # Chroma would write through it
        with _named_damage(cfg, name):
            client = make_chroma_client(cfg)
            recorded = store_backend(client, name) if cfg.encoder_backend == "auto" else None
        if embedder is None and embedder_for is not None:
            embedder = embedder_for(recorded)
        with _named_damage(cfg, name):
            store = make_store(cfg, name, create=True, embedder=embedder, hnsw=hnsw, client=client)
        with dropped_unless_written(store):
            yield store


@contextlib.contextmanager
def _named_damage(cfg: RetrievalConfig, name: str) -> Iterator[None]:
    """Chroma failing to open an embedded store's files (a cut or overwritten ``chroma.sqlite3``)
    as a :class:`StoreDamagedError` naming the store and the repair, not Chroma's traceback."""
    try:
        yield
    except Exception as e:  # noqa: BLE001 - Chroma's error classes differ by client and version
        if cfg.chroma_host or not is_chroma_error(e):
            raise
        failure = write_failure(name, cfg.location(), e, "opening it for writing")
        if failure is not None:  # a full disk or a read-only folder, not damage
            raise failure from e
        raise StoreDamagedError(
            f"store {name} at {cfg.location()} cannot be opened for writing ({type(e).__name__}: {e}"[:400]
            + f"). {repair_hint(name, new_folder=True)}"
        ) from e


def store_location(cfg: RetrievalConfig) -> StoreLocation:
    """Where ``cfg`` says stores live (a Chroma server, else the embedded folder), as every
    client here and the isolated store reader open it."""
    if not cfg.chroma_host and cfg.chroma_path is None:
        raise ValueError("no store location: set chroma_path (embedded store) or chroma_host (Chroma server)")
    return StoreLocation(path=cfg.chroma_path, host=cfg.chroma_host, port=cfg.chroma_port)


def _describe_chroma_stores(
    cfg: RetrievalConfig, *, timeout_s: float = DEFAULT_READ_TIMEOUT_S
) -> list[dict[str, Any]]:
    """Name, count, model and location of every store where ``cfg`` says stores live, read in a
    child process: a store that crashes or hangs Chroma, or whose files do not add up, is listed
    with an ``error``; a store this process may not write, with ``read_only`` (Chroma cannot open
    it; its files are still checked)."""
    if not cfg.chroma_host and (cfg.chroma_path is None or not cfg.chroma_path.exists()):
        return []
    location = redact_url(cfg.location())
    if cfg.chroma_host:
        rows = list_stores(store_location(cfg), timeout_s=timeout_s)
        return [dict(row, location=location) for row in rows]
    assert cfg.chroma_path is not None
    reason = read_only_reason(cfg.chroma_path)
    known: dict[str, dict[str, Any]] = {}  # stores Chroma must not open: read-only, or broken files
    for name in sqlite_store_names(cfg.chroma_path):
        files = inspect_store(cfg.chroma_path, name)
        row: dict[str, Any] = {"name": name, "count": files.passages}
        if not files.ok:
            row["error"] = files.describe()
        if reason:
            row["read_only"] = reason
        if reason or not files.ok:
            known[name] = row
    if reason:
        rows = list(known.values())
    else:
        rows = list_stores(store_location(cfg), timeout_s=timeout_s, known=known)
    return [dict(row, location=location) for row in sorted(rows, key=lambda r: r["name"])]


def _remote_searcher(cfg: RetrievalConfig) -> Searcher:
    """A Search-R1 ``/retrieve`` server at ``retriever_url``."""
    if cfg.retriever_url is None:
        raise ValueError(
            "searcher 'remote' needs retriever_url (--retriever URL, PARALLELSEARCH_RETRIEVER_URL)"
        )
    client = RetrieverClient(
        cfg.retriever_url,
        timeout_s=cfg.retriever_timeout_s,
        api_key=cfg.retriever_api_key,
        ca_bundle=cfg.retriever_ca_bundle,
    )
    return RemoteSearcher(client)


def _open_chroma_stores(cfg: RetrievalConfig) -> dict[str, Any]:
    """The Chroma ``stores`` through one client (sharded ones opened shard by shard)."""
    specs = [cfg.store_spec(entry) for entry in cfg.stores]
    plain = [spec.name for spec in specs if not spec.sharded]
    client, samples = reading_client(cfg, plain) if plain else (None, {})
    return {
        spec.name: make_sharded_store(cfg, spec)
        if spec.sharded
        else make_store(cfg, spec.name, client=client, sample_ids=samples.get(spec.name))
        for spec in specs
    }


def _store_searcher(cfg: RetrievalConfig) -> Searcher:
    """The ``stores`` of the configured kind; several are routed by ``name: query``."""
    kind = store_kind(cfg)
    if kind.open_all is not None:
        stores = kind.open_all(cfg)
    else:
        stores = {cfg.store_spec(entry).name: kind.open(cfg, entry) for entry in cfg.stores}
    searchers: dict[str, Searcher] = {name: StoreSearcher(store) for name, store in stores.items()}
    return next(iter(searchers.values())) if len(searchers) == 1 else MultiStoreSearcher(searchers)


def _store_names(cfg: RetrievalConfig) -> list[str]:
    """The stores ``stores`` names (a sharded declaration by its name), known before any opens."""
    return [cfg.store_spec(entry).name for entry in cfg.stores]


def _check_chroma_store(
    cfg: RetrievalConfig, name: str, *, timeout_s: float = DEFAULT_READ_TIMEOUT_S, progress: bool = False
) -> StoreCheck:
    """:func:`~parallelsearch.stores.isolated_read.check_store`: read in a child process, since a
    damaged segment can crash or hang Chroma's reader."""
    return check_store(store_location(cfg), name, timeout_s=timeout_s, progress=progress)


@dataclass(frozen=True)
class StoreKind:
    """A store kind a configuration can name (``RetrievalConfig.store_kind``): how its stores open
    for reading and for writing, how they are listed and checked, and where they live.
    ``open_all``: the configured ``stores`` opened together (Chroma shares one client)."""

    open: Callable[[RetrievalConfig, str], Any]
    open_for_writing: Callable[..., contextlib.AbstractContextManager[Any]]
    describe: Callable[..., list[dict[str, Any]]]
    check: Callable[..., StoreCheck]
    location: Callable[[RetrievalConfig], str]
    open_all: Callable[[RetrievalConfig], dict[str, Any]] | None = None


#: every store kind, one row each: ``--store-kind``'s choices, the searchers, ``index``, ``stores``,
#: ``--check`` and ``--verify`` read it (a new kind is its module and one row)
STORE_KINDS: dict[str, StoreKind] = {
    "chroma": StoreKind(
        _open_chroma,
        _writing_chroma_store,
        _describe_chroma_stores,
        _check_chroma_store,
        RetrievalConfig.location,
        open_all=_open_chroma_stores,
    ),
    "faiss": StoreKind(
        lambda cfg, name: open_faiss_store(cfg, name),
        writing_faiss_store,
        describe_faiss_stores,
        check_faiss_store,
        RetrievalConfig.kind_location,
    ),
}


def store_kind(cfg: RetrievalConfig) -> StoreKind:
    """The row of ``STORE_KINDS`` the configuration names, or a ValueError listing the kinds."""
    return STORE_KINDS[check_choice(cfg.store_kind, tuple(STORE_KINDS), "store kind")]


@dataclass(frozen=True)
class SearcherKind:
    """A searcher kind a configuration can name: how it opens, and, for one that loads heavy state
    (Chroma, an encoder), the names of what it will search, known before it opens: such a kind
    opens at its first search where graphs are built at import (:func:`deferred_searcher`)."""

    open: Callable[[RetrievalConfig], Searcher]
    deferred_names: Callable[[RetrievalConfig], list[str]] | None = None


#: every searcher kind a configuration can name (``RetrievalConfig.searcher``): one entry per kind, a
#: :class:`SearcherKind` or just its opener (opened at once everywhere)
SEARCHER_KINDS: dict[str, SearcherKind | Callable[[RetrievalConfig], Searcher]] = {
    "remote": SearcherKind(_remote_searcher),
    "stores": SearcherKind(_store_searcher, deferred_names=_store_names),
}


def searcher_kind(cfg: RetrievalConfig) -> SearcherKind:
    """The entry of ``SEARCHER_KINDS`` the configuration names (a bare opener as a kind), or a
    ValueError listing the kinds."""
    entry = SEARCHER_KINDS[check_choice(cfg.searcher_kind(), tuple(SEARCHER_KINDS), "searcher")]
    return entry if isinstance(entry, SearcherKind) else SearcherKind(entry)


def make_searcher(cfg: RetrievalConfig) -> Searcher:
    """What the graphs search: the searcher kind the configuration names (``SEARCHER_KINDS``)."""
    return searcher_kind(cfg).open(cfg)


def make_policy(cfg: PolicyConfig | str, *, answer: bool = False) -> Policy:
    """The policy ``cfg`` names (a :class:`PolicyConfig` or a bare spec string), with the
    configured OpenAI base URL, key and timeout. ``answer=True`` builds the answer policy."""
    if isinstance(cfg, str):
        cfg = PolicyConfig(policy=cfg)
    spec = cfg.answer_policy if answer else cfg.policy
    if spec is None:
        raise ValueError("no answer policy is configured")
    return policy_from_spec(
        spec,
        base_url=cfg.openai_base_url,
        api_key=cfg.openai_api_key,
        ca_bundle=cfg.openai_ca_bundle,
        timeout_s=cfg.request_timeout_s,
        chat_base_url=cfg.policy_base_url,
        constrained=cfg.constrained,
        think_chars=cfg.constrained_think_chars,
        engine_args=cfg.vllm_engine_args,
    )


@dataclass(frozen=True)
class GraphParts:
    """The policy, answer policy, searcher and knobs every graph of one run shares, built once
    (a server compiles each route from them; an evaluation runs each kind over them)."""

    policy: Policy
    searcher: Searcher | None = None
    answer_policy: Policy | None = None
    config: GraphConfig = field(default_factory=GraphConfig)

    def graph(self, kind: str, checkpointer: Any = None) -> SearchGraph:
        """The compiled graph of ``kind`` (the builders ignore the answer policy where no turn uses it)."""
        return build_graph(
            kind,
            self.policy,
            self.searcher,
            answer_policy=self.answer_policy,
            checkpointer=checkpointer,
            config=self.config,
        )


def deferred_searcher(cfg: RetrievalConfig) -> Searcher:
    """:func:`make_searcher`'s searcher, opened at its first search when its kind declares what it
    will search (``SearcherKind.deferred_names``: Chroma, torch and the encoder load then, in a worker
    thread), so graphs built at import stay quick to import; any other kind is made at once."""
    kind = searcher_kind(cfg)
    if kind.deferred_names is None:
        return kind.open(cfg)
    names = kind.deferred_names(cfg)
    return DeferredSearcher(
        lambda: kind.open(cfg), names, what=f"the stores {names} at {stores_location(cfg)}"
    )


def make_parts(
    kinds: Iterable[str],
    *,
    policy: PolicyConfig | Policy,
    retrieval: RetrievalConfig | Searcher | None,
    graph_config: GraphConfig | None = None,
    defer_stores: bool = False,
) -> GraphParts:
    """The parts for graphs of ``kinds``: the one path from configuration to graphs. ``policy`` and
    ``retrieval`` may be configuration or built objects; no searcher is opened for ``direct`` only.
    ``defer_stores``: the stores open at the first search (:func:`deferred_searcher`)."""
    kinds = [check_graph_kind(k) for k in kinds]
    answer_policy = None
    if isinstance(policy, PolicyConfig):
        answer_policy = make_policy(policy, answer=True) if policy.answer_policy else None
        policy = make_policy(policy)
    searcher = retrieval
    if isinstance(retrieval, RetrievalConfig):
        opener = deferred_searcher if defer_stores else make_searcher
        searcher = opener(retrieval) if any(k != "direct" for k in kinds) else None
    return GraphParts(
        policy, searcher, answer_policy, graph_config if graph_config is not None else GraphConfig()
    )
