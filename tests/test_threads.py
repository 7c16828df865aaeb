"""Threads in the LangServe app (real HTTP on loopback, a real store) and the checkpointer factory.

A request with ``config.configurable.thread_id`` runs on the checkpointed graph; one without
runs the plain graph and leaves nothing in the thread database. The restart and Postgres
tests with real server processes are in tests/test_serve_processes.py.
"""

from __future__ import annotations

import asyncio
import sqlite3

import httpx
import pytest
from conftest import UvicornThread, free_port, needs_data, wait_for
from engines import GatedPolicy

from parallelsearch.agents.policies import ScriptedPolicy
from parallelsearch.serving.checkpointers import open_checkpointer, redact_url
from parallelsearch.serving.server import create_app
from parallelsearch.settings import Settings

Q1 = "Were Scott Derrickson and Ed Wood of the same nationality?"
Q2 = "Which magazine was started first, Arthur's Magazine or First for Women?"
SCRIPT = [
    "<think>two</think><search> Scott Derrickson ## Ed Wood </search>",
    "<think>both American</think><answer> yes </answer>",
]


def invoke(url, question, thread_id=None, route="parallelsearch", **configurable):
    if thread_id is not None:
        configurable["thread_id"] = thread_id
    body = {"input": {"question": question}, "config": {"configurable": configurable}}
    return httpx.post(f"{url}/{route}/invoke", json=body, timeout=60)


@pytest.fixture(scope="module")
def sqlite_server(hotpot_store, tmp_path_factory):
    db = tmp_path_factory.mktemp("threads") / "threads.sqlite"
    settings = Settings(server_checkpointer="sqlite", server_checkpoint_url=str(db))
    app = create_app(settings, policy=ScriptedPolicy(SCRIPT), searcher=hotpot_store)
    with UvicornThread(app) as srv:
        srv.db = db
        yield srv


@needs_data
def test_thread_id_keeps_a_thread_and_a_second_question_is_a_new_episode(sqlite_server):
    url = sqlite_server.url
    r1 = invoke(url, Q1, "thread-a", top_k=1)
    assert r1.status_code == 200, r1.text
    out1 = r1.json()["output"]
    assert out1["answer"] == "yes" and out1["passages"] == 2  # top_k=1 travelled with the thread_id
    state = httpx.get(f"{url}/parallelsearch/threads/thread-a", timeout=30).json()
    assert state["values"]["question"] == Q1 and state["status"] == "answered" and state["episodes"] == 1

    out2 = invoke(url, Q2, "thread-a").json()["output"]
    assert out2["policy_calls"] == 2 and f"Question: {Q2}\n" in out2["transcript"]
    assert f"User: {Q1}\nAssistant: yes\nQuestion: {Q2}\n" in out2["transcript"]  # the thread, as memory
    state = httpx.get(f"{url}/parallelsearch/threads/thread-a", timeout=30).json()
    assert state["values"]["question"] == Q2
    assert [(h["question"], h["answer"]) for h in state["values"]["history"]] == [(Q1, "yes"), (Q2, "yes")]
    hist = httpx.get(
        f"{url}/parallelsearch/threads/thread-a/history", params={"limit": 50}, timeout=30
    ).json()
    questions = {c["question"] for c in hist["checkpoints"] if c["status"] == "answered"}
    assert questions == {Q1, Q2}  # the first episode's final state is still a checkpoint

    # the rows are in the SQLite file
    with sqlite3.connect(sqlite_server.db) as conn:
        threads = {row[0] for row in conn.execute("select distinct thread_id from checkpoints")}
    assert threads == {"thread-a"}


@needs_data
def test_requests_without_a_thread_write_nothing_and_stream_on_a_thread(sqlite_server):
    url = sqlite_server.url
    before = _count_checkpoints(sqlite_server.db)
    assert invoke(url, Q1).json()["output"]["answer"] == "yes"
    batch = httpx.post(
        f"{url}/parallelsearch/batch", json={"inputs": [{"question": "a?"}, {"question": "b?"}]}, timeout=60
    )
    assert [o["answer"] for o in batch.json()["output"]] == ["yes", "yes"]
    assert _count_checkpoints(sqlite_server.db) == before
    # streaming and other routes keep threads too
    body = {"input": {"question": Q1}, "config": {"configurable": {"thread_id": "thread-s"}}}
    with httpx.stream("POST", f"{url}/sequential/stream", json=body, timeout=60) as r:
        text = "".join(r.iter_text())
    assert "event: data" in text and "event: end" in text
    state = httpx.get(f"{url}/sequential/threads/thread-s", timeout=30).json()
    assert state["values"]["answer"] == "yes"
    # RemoteRunnable's stream_events on a thread
    from langserve import RemoteRunnable

    async def events():
        remote = RemoteRunnable(f"{url}/rag")
        cfg = {"configurable": {"thread_id": "thread-e"}}
        return [e async for e in remote.astream_events({"question": Q1}, cfg, version="v2")]

    evs = asyncio.run(events())
    assert any(e["event"] == "on_chain_end" and e.get("name") == "retrieve" for e in evs)
    values = httpx.get(f"{url}/rag/threads/thread-e", timeout=30).json()["values"]
    # the rag graph's one turn is answer-only, and the script searches: kept on the thread all the same
    assert values["question"] == Q1 and values["status"] == "unanswered" and values["search_rounds"] == 1


def _count_checkpoints(db):
    with sqlite3.connect(db) as conn:
        return conn.execute("select count(*) from checkpoints").fetchone()[0]


@needs_data
@pytest.mark.parametrize(
    ("thread_id", "status", "message"),
    [
        ("has space", 422, "not a valid id"),
        ("x" * 200, 422, "not a valid id"),
        ("../etc", 422, "not a valid id"),
    ],
)
def test_bad_thread_ids_are_a_422(sqlite_server, thread_id, status, message):
    r = invoke(sqlite_server.url, Q1, thread_id)
    assert r.status_code == status and message in r.text


@needs_data
def test_unknown_thread_is_a_404(sqlite_server):
    r = httpx.get(f"{sqlite_server.url}/parallelsearch/threads/never-ran", timeout=30)
    assert r.status_code == 404 and "no thread 'never-ran'" in r.text
    r = httpx.get(f"{sqlite_server.url}/parallelsearch/threads/never-ran/history", timeout=30)
    assert r.status_code == 404


@needs_data
def test_a_server_without_threads_refuses_a_thread_id(hotpot_store):
    app = create_app(
        Settings(server_checkpointer="none"), policy=ScriptedPolicy(SCRIPT), searcher=hotpot_store
    )
    with UvicornThread(app) as srv:
        r = invoke(srv.url, Q1, "thread-a")
        assert r.status_code == 400 and "keeps no threads" in r.text
        assert invoke(srv.url, Q1).json()["output"]["answer"] == "yes"
        assert httpx.get(f"{srv.url}/parallelsearch/threads/thread-a", timeout=10).status_code == 404
        assert httpx.get(f"{srv.url}/health", timeout=10).json()["threads"] == "none"


@needs_data
def test_the_page_is_public_and_the_api_key_guards_its_requests(hotpot_store):
    app = create_app(
        Settings(server_api_key="k3y", server_checkpointer="memory"),
        policy=ScriptedPolicy(SCRIPT),
        searcher=hotpot_store,
    )
    with UvicornThread(app) as srv:
        page = httpx.get(f"{srv.url}/ui", timeout=10)
        assert page.status_code == 200 and "text/html" in page.headers["content-type"]
        assert "/stream" in page.text and "x-api-key" in page.text
        health = httpx.get(f"{srv.url}/health", timeout=10).json()
        assert health["api_key_required"] is True and health["threads"] == "memory"
        body = {"input": {"question": Q1}, "config": {"configurable": {"thread_id": "k"}}}
        assert httpx.post(f"{srv.url}/parallelsearch/stream", json=body, timeout=30).status_code == 401
        assert httpx.get(f"{srv.url}/parallelsearch/threads/k", timeout=10).status_code == 401
        ok = httpx.post(
            f"{srv.url}/parallelsearch/invoke", json=body, headers={"X-API-Key": "k3y"}, timeout=60
        )
        assert ok.status_code == 200 and ok.json()["output"]["answer"] == "yes"
        r = httpx.get(f"{srv.url}/parallelsearch/threads/k", headers={"X-API-Key": "k3y"}, timeout=10)
        assert r.json()["values"]["history"][0]["question"] == Q1


# ---- the checkpointer factory ------------------------------------------------------------------
def test_open_checkpointer_kinds_and_errors(tmp_path):
    async def go():
        async with open_checkpointer("none") as none:
            assert none is None
        async with open_checkpointer("memory") as mem:
            assert type(mem).__name__ == "InMemorySaver"
        db = tmp_path / "deep" / "er" / "threads.sqlite"
        async with open_checkpointer("sqlite", str(db)) as saver:
            assert type(saver).__name__ == "AsyncSqliteSaver"
        assert db.is_file()  # folders created, tables set up at entry
        with pytest.raises(ValueError, match="unknown checkpointer 'redis'"):
            async with open_checkpointer("redis"):
                pass
        with pytest.raises(ValueError, match="needs a database file"):
            async with open_checkpointer("sqlite", None):
                pass
        (tmp_path / "afile").write_text("x")
        with pytest.raises(ValueError, match="cannot create the folder"):
            async with open_checkpointer("sqlite", str(tmp_path / "afile" / "threads.sqlite")):
                pass
        with pytest.raises(ValueError, match="postgresql://"):
            async with open_checkpointer("postgres", "mysql://u:secret@h/db"):
                pass
        # nothing listens on this port: a clear error within the timeout, password redacted
        url = f"postgresql://u:s3cret@127.0.0.1:{free_port()}/db"
        with pytest.raises(ConnectionError, match="cannot reach PostgreSQL") as e:
            async with open_checkpointer("postgres", url, timeout_s=2):
                pass
        assert "s3cret" not in str(e.value) and "***" in str(e.value)

    asyncio.run(go())
    assert redact_url("postgresql://u:pw@h:5432/db") == "postgresql://u:***@h:5432/db"
    assert redact_url("postgresql://h/db") == "postgresql://h/db"


def test_checkpointer_settings_and_flags(tmp_path, monkeypatch):
    import argparse

    from parallelsearch.cli import build_parser
    from parallelsearch.cli.common import settings_from_args

    s = Settings(home=tmp_path)
    assert s.server_checkpointer == "sqlite" and s.checkpoint_target() == str(tmp_path / "threads.sqlite")
    monkeypatch.setenv("PARALLELSEARCH_SERVER_CHECKPOINTER", "postgres")
    monkeypatch.setenv("PARALLELSEARCH_SERVER_CHECKPOINT_URL", "postgresql://u:pw@h/db")
    s = Settings()
    assert s.checkpoint_target() == "postgresql://u:pw@h/db" and "pw" not in repr(s)
    args = build_parser().parse_args(["serve", "--checkpointer", "memory"])
    assert isinstance(args, argparse.Namespace)
    assert settings_from_args(args).server_checkpointer == "memory"
    with pytest.raises(ValueError, match="server_checkpointer"):
        Settings(server_checkpointer="redis")


# ---- concurrent runs on one thread ---------------------------------------------------------------
def _health(srv) -> dict:
    return httpx.get(f"{srv.url}/health", timeout=10).json()


def _in(srv) -> int:
    """Runs the server holds: in flight, or waiting for their thread."""
    health = _health(srv)
    return health["admission"]["in_flight"] + health.get("threads_waited", 0)


def _ask_in_thread(url, question, thread_id, results):
    import threading

    def go():
        results.append(invoke(url, question, thread_id))

    t = threading.Thread(target=go, daemon=True)
    t.start()
    return t


def _ten_questions_on_one_thread(servers, gate) -> list:
    """Hold the first run inside the graph, queue nine more on the same thread (spread over
    ``servers``), then let them all go; every reply, in order of arrival."""
    questions = [f"question {i}: who directed it?" for i in range(10)]
    results: list = []
    first = _ask_in_thread(servers[0].url, questions[0], "busy", results)
    wait_for(lambda: _health(servers[0])["admission"]["in_flight"] == 1, "the first run holding the thread")
    rest = [
        _ask_in_thread(servers[i % len(servers)].url, q, "busy", results)
        for i, q in enumerate(questions[1:], 1)
    ]
    # all ten are in: one in the graph and nine waiting for the thread (before the fix: ten in the graph)
    wait_for(lambda: sum(_in(s) for s in servers) == 10, "ten runs in the server")
    gate.set()
    for t in [first, *rest]:
        t.join(120)
    return results


@needs_data
def test_ten_concurrent_questions_on_one_sqlite_thread_keep_ten_episodes(hotpot_store, tmp_path):
    gated = GatedPolicy(SCRIPT)
    settings = Settings(server_checkpointer="sqlite", server_checkpoint_url=str(tmp_path / "threads.sqlite"))
    with UvicornThread(create_app(settings, policy=gated, searcher=hotpot_store)) as srv:
        results = _ten_questions_on_one_thread([srv], gated.gate)
        assert [r.status_code for r in results] == [200] * 10, [r.text[:200] for r in results]
        state = httpx.get(f"{srv.url}/parallelsearch/threads/busy", timeout=30).json()
    assert state["episodes"] == 10
    assert {h["question"] for h in state["values"]["history"]} == {
        f"question {i}: who directed it?" for i in range(10)
    }
    assert all(h["status"] == "answered" for h in state["values"]["history"])


@needs_data
def test_ten_concurrent_questions_on_one_postgres_thread_across_two_servers(hotpot_store):
    """Two app instances (two connection pools, two lock sessions: what two processes have)."""
    from serving import postgres_missing, throwaway_postgres

    if postgres_missing():
        pytest.skip(postgres_missing())
    gated = GatedPolicy(SCRIPT)
    with throwaway_postgres() as pg:
        settings = Settings(server_checkpointer="postgres", server_checkpoint_url=pg["url"])
        apps = [create_app(settings, policy=gated, searcher=hotpot_store) for _ in range(2)]
        with UvicornThread(apps[0]) as a, UvicornThread(apps[1]) as b:
            results = _ten_questions_on_one_thread([a, b], gated.gate)
            assert [r.status_code for r in results] == [200] * 10, [r.text[:200] for r in results]
            state = httpx.get(f"{b.url}/parallelsearch/threads/busy", timeout=30).json()
    assert state["episodes"] == 10 and all(h["status"] == "answered" for h in state["values"]["history"])


@needs_data
def test_reject_answers_409_while_a_run_is_in_flight(hotpot_store, tmp_path):
    gated = GatedPolicy(SCRIPT)
    settings = Settings(server_checkpointer="memory", server_multitask_strategy="reject")
    with UvicornThread(create_app(settings, policy=gated, searcher=hotpot_store)) as srv:
        results: list = []
        first = _ask_in_thread(srv.url, Q1, "t-reject", results)
        wait_for(lambda: _health(srv)["admission"]["in_flight"] == 1, "the first run holding the thread")
        busy = invoke(srv.url, Q2, "t-reject")
        assert busy.status_code == 409 and "thread 't-reject' has a run in flight" in busy.json()["detail"]
        other = _ask_in_thread(srv.url, Q2, "t-other", results)  # another thread is not held up
        gated.gate.set()
        first.join(60), other.join(60)
        assert [r.status_code for r in results] == [200, 200]
        assert invoke(srv.url, Q2, "t-reject").status_code == 200
        assert httpx.get(f"{srv.url}/parallelsearch/threads/t-reject", timeout=30).json()["episodes"] == 2
        assert _health(srv)["threads_rejected"] == 1
