"""Threads outlive the server process: real ``parallelsearch serve`` subprocesses, killed and restarted.

SQLite (the embedded default): run on a thread, SIGKILL the server's process group,
start it again, read the thread back and continue it. PostgreSQL (several processes):
a throwaway cluster from Debian's package, two servers sharing it; a thread written
through one is read and continued through the other after the first was killed.
"""

from __future__ import annotations

import asyncio
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from conftest import needs_data
from serving import copy_store, postgres_missing, record, serve_process, throwaway_postgres

pytestmark = [needs_data, pytest.mark.serving, pytest.mark.slow]
Q1 = "Were Scott Derrickson and Ed Wood of the same nationality?"
Q2 = "Which magazine was started first, Arthur's Magazine or First for Women?"


def ask(url, question, thread_id):
    body = {"input": {"question": question}, "config": {"configurable": {"thread_id": thread_id}}}
    r = httpx.post(url + "/parallelsearch/invoke", json=body, timeout=120)
    assert r.status_code == 200, r.text
    return r.json()["output"]


def thread(url, thread_id):
    r = httpx.get(f"{url}/parallelsearch/threads/{thread_id}", timeout=60)
    assert r.status_code == 200, r.text
    return r.json()


def test_sqlite_threads_survive_a_killed_server(hotpot_store, tmp_path):
    store = copy_store(hotpot_store, tmp_path / "chroma")
    db = tmp_path / "threads.sqlite"
    first = serve_process(tmp_path, store, log_name="serve1.log", server_checkpointer="sqlite",
                          server_checkpoint_url=str(db)).start()  # fmt: skip
    try:
        assert httpx.get(first.url + "/health", timeout=10).json()["threads"] == "sqlite"
        out = ask(first.url, Q1, "restart-1")
        assert out["answer"] == "yes" and out["subqueries"] == 2
    finally:
        first.kill()  # SIGKILL: no shutdown hook runs, only what was committed survives
    assert not first.group_alive()

    second = serve_process(tmp_path, store, log_name="serve2.log", server_checkpointer="sqlite",
                           server_checkpoint_url=str(db)).start()  # fmt: skip
    try:
        state = thread(second.url, "restart-1")
        assert state["values"]["question"] == Q1 and state["values"]["answer"] == "yes"
        assert state["values"]["policy_calls"] == 2 and state["next"] == []
        out = ask(second.url, Q2, "restart-1")  # the thread goes on after the restart
        assert out["policy_calls"] == 2 and Q2 in out["transcript"]
        recs = thread(second.url, "restart-1")["values"]["history"]
        assert [(r["question"], r["status"]) for r in recs] == [(Q1, "answered"), (Q2, "answered")]
    finally:
        second.kill()
    record("parallelsearch serve (sqlite threads): first start until /health", first.ready_s)
    record("parallelsearch serve (sqlite threads): restart after SIGKILL until /health", second.ready_s)


@pytest.mark.skipif(postgres_missing() is not None, reason=str(postgres_missing()))
def test_postgres_threads_are_shared_by_two_server_processes(hotpot_store, tmp_path):
    store = copy_store(hotpot_store, tmp_path / "chroma")
    with throwaway_postgres() as pg:
        servers = [
            serve_process(
                tmp_path,
                store,
                log_name=f"serve-pg{i}.log",
                server_checkpointer="postgres",
                server_checkpoint_url=pg["url"],
            )  # fmt: skip
            for i in (1, 2)
        ]
        a, b = servers
        try:
            t0 = time.perf_counter()
            with ThreadPoolExecutor(2) as pool:
                list(pool.map(lambda s: s.start(), servers))  # both start at once against one database
            both_ready_s = time.perf_counter() - t0
            assert httpx.get(a.url + "/health", timeout=10).json()["threads"] == "postgres"
            assert ask(a.url, Q1, "pg-1")["answer"] == "yes"
            a.kill()
            assert not a.group_alive()
            state = thread(b.url, "pg-1")  # written by the killed process, read by the other
            assert state["values"]["question"] == Q1 and state["values"]["answer"] == "yes"
            out = ask(b.url, Q2, "pg-1")
            assert (
                out["policy_calls"] == 2
                and f"User: {Q1}\nAssistant: yes\nQuestion: {Q2}\n" in out["transcript"]
            )
            recs = thread(b.url, "pg-1")["values"]["history"]
            assert [r["question"] for r in recs] == [Q1, Q2]
        finally:
            for s in servers:
                s.kill()
    record(f"PostgreSQL {pg['version']}: initdb + start", pg["started_s"])
    record(
        "two parallelsearch serve processes (postgres threads) starting together until /health", both_ready_s
    )


@pytest.mark.skipif(postgres_missing() is not None, reason=str(postgres_missing()))
def test_postgres_tables_are_set_up_once_when_servers_start_together():
    """Two checkpointers entering at once on a fresh database (what two servers starting together
    do): LangGraph's migrations are not safe to run concurrently, ours serialise them."""
    from parallelsearch.serving.checkpointers import open_checkpointer

    async def one(url):
        async with open_checkpointer("postgres", url) as saver:
            return type(saver).__name__

    async def both(url):
        return await asyncio.gather(*(one(url) for _ in range(4)))

    with throwaway_postgres() as pg:
        assert asyncio.run(both(pg["url"])) == ["AsyncPostgresSaver"] * 4
