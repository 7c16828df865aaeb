"""The checkpointer a server keeps its threads in: none, memory, SQLite or Postgres.

Only the app's thread routes (:mod:`parallelsearch.serving.thread_routes`) open one, inside the server's
lifespan; the graphs take it as an already open object (docs/architecture.md, "Threads").
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, get_args
from urllib.parse import urlsplit

from parallelsearch.settings import CheckpointerKind
from parallelsearch.stores.errors import check_choice
from parallelsearch.stores.redact import redact_url

#: what ``open_checkpointer`` accepts (the settings' ``server_checkpointer``)
CHECKPOINTERS: tuple[str, ...] = get_args(CheckpointerKind)
__all__ = ["CHECKPOINTERS", "CheckpointerKind", "open_checkpointer", "redact_url"]

#: the Postgres advisory lock that serialises checkpoint-table migrations across processes
_SETUP_LOCK = 0x70617261_6C6C656C  # "parallel"


def _missing(package: str, extra: str) -> ImportError:
    return ImportError(f"this checkpointer needs {package}: pip install 'parallelsearch[{extra}]'")


@contextlib.asynccontextmanager
async def open_checkpointer(
    kind: str, target: str | None = None, *, timeout_s: float = 10.0, pool_size: int = 10
) -> AsyncIterator[Any]:
    """A LangGraph checkpointer for served threads, open for the ``async with`` block.

    Enter it inside the event loop that runs the graphs (a server's lifespan): the async savers bind
    to the running loop. ``target``: sqlite's database file, or postgres's ``postgresql://`` URL (a
    pool: several server processes share one set of threads). The tables are created on entry, so a
    bad target fails at start-up, within ``timeout_s``, naming it (a URL's password redacted).
    """
    check_choice(kind, CHECKPOINTERS, "checkpointer")
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


class PostgresThreadLock:
    """Session-level advisory locks (one per thread id) on one dedicated connection, so server
    processes sharing a Postgres thread store run one run per thread between them; a process
    that dies drops its locks with its connection."""

    def __init__(self, conn: Any):
        self.conn = conn

    @staticmethod
    def key(thread_id: str) -> int:
        digest = hashlib.sha256(b"parallelsearch thread\0" + thread_id.encode("utf-8")).digest()
        return int.from_bytes(digest[:8], "big", signed=True)

    async def try_lock(self, thread_id: str) -> bool:
        cur = await self.conn.execute("SELECT pg_try_advisory_lock(%s)", (self.key(thread_id),))
        row = await cur.fetchone()
        return bool(row[0])

    async def unlock(self, thread_id: str) -> None:
        await self.conn.execute("SELECT pg_advisory_unlock(%s)", (self.key(thread_id),))


@contextlib.asynccontextmanager
async def open_thread_lock(kind: str, target: str | None, *, timeout_s: float = 10.0) -> AsyncIterator[Any]:
    """The lock threads need across processes: Postgres's (:class:`PostgresThreadLock`); None for
    the kinds one process owns (memory, sqlite) or no threads."""
    if kind != "postgres" or not target:
        yield None
        return
    import psycopg

    try:
        conn = await psycopg.AsyncConnection.connect(
            target, autocommit=True, connect_timeout=max(1, int(timeout_s))
        )
    except psycopg.OperationalError as e:
        raise ConnectionError(
            f"cannot reach PostgreSQL at {redact_url(target)}: {redact_url(str(e))}"
        ) from None
    async with conn:
        yield PostgresThreadLock(conn)
