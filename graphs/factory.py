"""Configuration -> runtime objects: embedders, stores, searchers, policies and graphs.

This module is the one place that turns configuration models
(:class:`~parallelsearch.stores.config.RetrievalConfig`,
:class:`~parallelsearch.agents.policies.config.PolicyConfig`,
:class:`~parallelsearch.graphs.config.GraphConfig`) into the objects that run. Every entry
point goes through it: the CLI commands, ``parallelsearch serve``, ``langgraph_app.py``,
the OpenRLHF agent config and the notebooks. Changing how a store is opened or a policy
is reached is therefore one edit here (docs/architecture.md, "Configuration"). It also
opens the checkpointer a server keeps its threads in (:func:`open_checkpointer`).

It sits in the ``graphs`` layer because it needs every part below (stores, agents,
graphs) and must be importable by ``rl``; the app's settings only produce the models.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit, urlunsplit

from parallelsearch.agents.policies.base import Policy
from parallelsearch.agents.policies.config import PolicyConfig
from parallelsearch.agents.policies.spec import policy_from_spec
from parallelsearch.agents.searchers.backends import MultiStoreSearcher, RemoteSearcher, StoreSearcher
from parallelsearch.agents.searchers.base import Searcher
from parallelsearch.graphs.builders import SEARCHING_KINDS, SearchGraph, build_graph, check_graph_kind
from parallelsearch.graphs.config import GraphConfig
from parallelsearch.stores.chroma_store import (
    ChromaStore,
    make_client,
    require_stores,
    store_backend,
    validate_store_name,
)
from parallelsearch.stores.config import RetrievalConfig
from parallelsearch.stores.encoding.embedder import Embedder, make_embedder
from parallelsearch.stores.isolated_read import DEFAULT_READ_TIMEOUT_S, StoreLocation, list_stores
from parallelsearch.stores.retrieval_client import RetrieverClient
from parallelsearch.stores.shard_spec import StoreSpec
from parallelsearch.stores.store_lock import StoreWriteLock

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
    if not cfg.chroma_host and cfg.chroma_path is None:
        raise ValueError("no store location: set chroma_path (embedded store) or chroma_host (Chroma server)")
    return make_client(path=cfg.chroma_path, host=cfg.chroma_host, port=cfg.chroma_port)


def make_store(
    cfg: RetrievalConfig,
    name: str,
    *,
    create: bool = False,
    embedder: Embedder | None = None,
    hnsw: dict[str, Any] | None = None,
    client: Any = None,
) -> ChromaStore:
    """The store ``name`` where ``cfg`` says stores live; a missing one is an error unless ``create``.

    ``hnsw``: Chroma's HNSW parameters for a new store (``stores/hnsw.py``); for an existing
    one, ``ef_search`` is changed and any other that differs is an error. ``client``: one the
    caller already opened for ``cfg`` (else a new one).
    """
    client = client or make_chroma_client(cfg)
    return ChromaStore(
        name,
        client=client,
        embedder=embedder or store_embedder(cfg, client, name),
        create=create,
        location=cfg.location(),
        hnsw=hnsw,
    )


def make_sharded_store(
    cfg: RetrievalConfig, spec: StoreSpec, *, embedder: Embedder | None = None
) -> ShardedStore:
    """The sharded store ``spec`` declares, every shard opened and checked against the others
    (``stores/sharded_store.py``); one encoder for all: ``embedder``, else the one the first shard
    records (``auto``)."""
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


def make_named_store(cfg: RetrievalConfig, name: str) -> ChromaStore | ShardedStore:
    """The store ``name`` for reading: a sharded one when ``cfg.stores`` declares it so (or ``name`` is
    a ``NAME=SHARD,...`` declaration), else :func:`make_store`."""
    spec = cfg.store_spec(name)
    return make_sharded_store(cfg, spec) if spec.sharded else make_store(cfg, spec.name)


@contextlib.contextmanager
def writing_store(
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

    An embedded store is locked (:mod:`parallelsearch.stores.store_lock`) before its client
    is opened, so this process loads the index the previous writer left; a Chroma server
    serialises writes itself. ``lock_timeout_s`` defaults to ``cfg.store_lock_timeout_s``.
    A store this call created is removed again when the block fails before adding anything,
    so a failed first ``index`` leaves no empty store behind. ``embedder_for(recorded)`` builds
    the encoder once the backend an existing store records is known (asked only with ``auto``;
    None: a new store), inside the lock, since opening the client earlier would load a stale index.
    """
    validate_store_name(name)
    lock: contextlib.AbstractContextManager[Any] = contextlib.nullcontext()
    if not cfg.chroma_host:
        if cfg.chroma_path is None:
            raise ValueError(
                "no store location: set chroma_path (embedded store) or chroma_host (Chroma server)"
            )
        timeout = cfg.store_lock_timeout_s if lock_timeout_s is None else lock_timeout_s
        lock = StoreWriteLock(cfg.chroma_path, name, timeout_s=timeout, on_wait=on_wait)
    with lock:
        client = make_chroma_client(cfg)
        if embedder is None and embedder_for is not None:
            embedder = embedder_for(store_backend(client, name) if cfg.encoder_backend == "auto" else None)
        store = make_store(cfg, name, create=True, embedder=embedder, hnsw=hnsw, client=client)
        try:
            yield store
        except BaseException:
            if store.created and store.count() == 0:
                store.drop()
            raise


def store_location(cfg: RetrievalConfig) -> StoreLocation:
    """Where ``cfg`` says stores live, as the isolated store reader opens it."""
    if not cfg.chroma_host and cfg.chroma_path is None:
        raise ValueError("no store location: set chroma_path (embedded store) or chroma_host (Chroma server)")
    return StoreLocation(path=cfg.chroma_path, host=cfg.chroma_host, port=cfg.chroma_port)


def describe_stores(
    cfg: RetrievalConfig, *, timeout_s: float = DEFAULT_READ_TIMEOUT_S
) -> list[dict[str, Any]]:
    """Name, count, model and location of every store where ``cfg`` says stores live.

    Read in a child process: a store that crashes or hangs Chroma is listed with an ``error``
    instead of taking the listing (and every healthy store in it) down.
    """
    if not cfg.chroma_host and (cfg.chroma_path is None or not cfg.chroma_path.exists()):
        return []
    location = cfg.location()
    return [dict(row, location=location) for row in list_stores(store_location(cfg), timeout_s=timeout_s)]


def make_searcher(cfg: RetrievalConfig) -> Searcher:
    """What the graphs search: a ``/retrieve`` server, one store, or several with routing."""
    if cfg.searcher_kind() == "remote":
        assert cfg.retriever_url is not None
        return RemoteSearcher(
            RetrieverClient(
                cfg.retriever_url, timeout_s=cfg.retriever_timeout_s, api_key=cfg.retriever_api_key
            )
        )
    specs = [cfg.store_spec(entry) for entry in cfg.stores]
    plain = [spec.name for spec in specs if not spec.sharded]
    client = make_chroma_client(cfg) if plain else None
    if plain:
        require_stores(client, plain, cfg.location())  # a typo fails before an encoder loads
    searchers: dict[str, Searcher] = {}
    for spec in specs:
        if spec.sharded:  # one encoder call per batch, for all its shards
            searchers[spec.name] = StoreSearcher(make_sharded_store(cfg, spec))
            continue
        # stores of one engine share one embedder (get_embedder's): no cache here
        searchers[spec.name] = StoreSearcher(make_store(cfg, spec.name, client=client))
    return next(iter(searchers.values())) if len(searchers) == 1 else MultiStoreSearcher(searchers)


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
        timeout_s=cfg.request_timeout_s,
        constrained=cfg.constrained,
        think_chars=cfg.constrained_think_chars,
        engine_args=cfg.vllm_engine_args,
    )


def make_answer_policy(cfg: PolicyConfig) -> Policy | None:
    """The separate answer-turn policy when one is configured, else None (the policy answers)."""
    return make_policy(cfg, answer=True) if cfg.answer_policy else None


def make_graph(
    kind: str,
    *,
    policy: Policy,
    searcher: Any = None,
    graph: GraphConfig | None = None,
    answer_policy: Policy | None = None,
    checkpointer: Any = None,
) -> SearchGraph:
    """One compiled graph of ``kind`` over already built parts."""
    return build_graph(
        kind, policy, searcher, answer_policy=answer_policy, checkpointer=checkpointer, config=graph
    )


def make_graphs(
    kinds: Iterable[str],
    *,
    policy: PolicyConfig | Policy,
    retrieval: RetrievalConfig | Searcher | None,
    graph: GraphConfig | None = None,
    checkpointer: Any = None,
) -> dict[str, SearchGraph]:
    """Several graphs sharing one policy and one searcher (a server's routes, an evaluation).

    ``policy`` and ``retrieval`` may be configuration (built here) or objects already
    built (tests and notebooks pass a scripted policy or a store); the ``direct`` graph
    alone needs no searcher.
    """
    kinds = [check_graph_kind(k) for k in kinds]
    answer_policy = None
    if isinstance(policy, PolicyConfig):
        answer_policy = make_answer_policy(policy)
        policy = make_policy(policy)
    searcher = retrieval
    if isinstance(retrieval, RetrievalConfig):
        searcher = make_searcher(retrieval) if any(k != "direct" for k in kinds) else None
    return {
        kind: make_graph(
            kind,
            policy=policy,
            searcher=searcher,
            graph=graph,
            answer_policy=answer_policy if kind in SEARCHING_KINDS else None,
            checkpointer=checkpointer,
        )
        for kind in kinds
    }


#: the Postgres advisory lock that serialises checkpoint-table migrations across processes
_SETUP_LOCK = 0x70617261_6C6C656C  # "parallel"
#: what ``open_checkpointer`` accepts (the app's ``server_checkpointer`` setting)
CHECKPOINTERS: tuple[str, ...] = ("none", "memory", "sqlite", "postgres")


def redact_url(url: str) -> str:
    """``url`` without its password, for messages and logs."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return urlunsplit(parts._replace(netloc=netloc))


def _missing(package: str, extra: str) -> ImportError:
    return ImportError(f"this checkpointer needs {package}: pip install 'parallelsearch[{extra}]'")


@contextlib.asynccontextmanager
async def open_checkpointer(
    kind: str, target: str | None = None, *, timeout_s: float = 10.0, pool_size: int = 10
) -> AsyncIterator[Any]:
    """A LangGraph checkpointer for served threads, open for the ``async with`` block.

    Enter it inside the event loop that runs the graphs (a server's lifespan): the async
    savers bind to the running loop. ``kind``: ``none`` (yields None), ``memory`` (threads
    last as long as the process), ``sqlite`` (``target`` = a database file; the embedded
    default, one process at a time) or ``postgres`` (``target`` = a ``postgresql://`` URL; a
    connection pool, so several server processes share one set of threads). The tables
    are created on entry, so a wrong path or an unreachable database fails at start-up,
    within ``timeout_s``, with the target named (a URL's password redacted).
    """
    if kind not in CHECKPOINTERS:
        raise ValueError(f"unknown checkpointer {kind!r}; choose one of {', '.join(CHECKPOINTERS)}")
    if kind == "none":
        yield None
    elif kind == "memory":
        from langgraph.checkpoint.memory import InMemorySaver

        yield InMemorySaver()
    elif kind == "sqlite":
        async with _sqlite_saver(target) as saver:
            yield saver
    else:
        async with _postgres_saver(target, timeout_s=timeout_s, pool_size=pool_size) as saver:
            yield saver


@contextlib.asynccontextmanager
async def _sqlite_saver(target: str | None) -> AsyncIterator[Any]:
    import sqlite3

    try:
        from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
    except ImportError as e:
        raise _missing("langgraph-checkpoint-sqlite", "serve") from e
    if not target:
        raise ValueError("the sqlite checkpointer needs a database file (server_checkpoint_url)")
    path = Path(target.removeprefix("sqlite:///")).expanduser()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ValueError(f"cannot create the folder for the thread database {path}: {e}") from e
    async with AsyncSqliteSaver.from_conn_string(str(path)) as saver:
        try:
            await saver.setup()
        except sqlite3.Error as e:
            raise ValueError(f"cannot use {path} as the thread database: {e}") from e
        yield saver


@contextlib.asynccontextmanager
async def _postgres_saver(target: str | None, *, timeout_s: float, pool_size: int) -> AsyncIterator[Any]:
    try:
        from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
        from psycopg.rows import dict_row
        from psycopg_pool import AsyncConnectionPool, PoolTimeout
    except ImportError as e:
        raise _missing("langgraph-checkpoint-postgres and psycopg", "postgres") from e
    if not target or urlsplit(target).scheme not in ("postgres", "postgresql"):
        shown = redact_url(target) if target else None
        raise ValueError(
            f"the postgres checkpointer needs a postgresql://user:password@host:port/db URL, got {shown!r}"
        )
    pool = AsyncConnectionPool(
        target,
        min_size=1,
        max_size=pool_size,
        open=False,
        timeout=timeout_s,
        # what AsyncPostgresSaver's queries expect; no server-side prepared statements (poolers)
        kwargs={
            "autocommit": True,
            "prepare_threshold": 0,
            "row_factory": dict_row,
            "connect_timeout": max(1, int(timeout_s)),
        },
    )
    try:
        try:
            await pool.open(wait=True, timeout=timeout_s)
        except PoolTimeout as e:
            raise ConnectionError(
                f"cannot reach PostgreSQL at {redact_url(target)} within {timeout_s:g} s"
            ) from e
        saver = AsyncPostgresSaver(pool)
        # the migrations are idempotent but not safe to run twice AT ONCE (two servers starting
        # together both insert the same migration row): one process at a time, by advisory lock
        async with pool.connection() as conn:
            await _advisory_lock(conn, timeout_s)
            try:
                await saver.setup()  # creates or migrates the checkpoint tables
            finally:
                await conn.execute("SELECT pg_advisory_unlock(%s)", (_SETUP_LOCK,))
        yield saver
    finally:
        await pool.close()


async def _advisory_lock(conn: Any, timeout_s: float) -> None:
    """Take the setup lock, polling: a session blocked in ``pg_advisory_lock`` keeps a statement
    open, and the migrations' ``CREATE INDEX CONCURRENTLY`` waits for every open statement,
    so blocking would deadlock the process that holds the lock."""
    import asyncio
    import time

    deadline = time.monotonic() + timeout_s
    while True:
        row = await (await conn.execute("SELECT pg_try_advisory_lock(%s) AS got", (_SETUP_LOCK,))).fetchone()
        if row["got"]:
            return
        if time.monotonic() > deadline:
            raise TimeoutError(
                f"another process held the checkpoint-table setup lock for over {timeout_s:g} s"
            )
        await asyncio.sleep(0.05)
