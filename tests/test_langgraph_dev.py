"""The repository's ``langgraph.json`` served for real by ``langgraph dev`` and driven with ``langgraph_sdk``.

``langgraph dev --no-browser --no-reload`` runs as a subprocess (its own process group)
on 127.0.0.1, offline (no analytics, no version check, no LangSmith), from a temporary
working directory (it writes ``.langgraph_api/`` there), with the scripted policy and a
copy of a real Chroma store. The graph module's import loads neither Chroma nor torch (the
first search does). The SDK creates a thread, streams ``updates``, ``values``
and ``events``, reads the thread's state and history, runs a second question on the same
thread, and sets ``top_k`` per run through the context; the schemas come from
``assistants.get_schemas``. The module stops the server's process group at the end.
"""

from __future__ import annotations

import json
import re
import signal
import time
from pathlib import Path

import pytest
from conftest import ROOT, free_port, needs_data
from serving import BIN, ServerProcess, copy_store, needs_langgraph_dev, record, script_file, store_env

pytestmark = [
    needs_data,
    pytest.mark.serving,
    pytest.mark.slow,
    needs_langgraph_dev,
]
Q1 = "Were Scott Derrickson and Ed Wood of the same nationality?"
Q2 = "Which magazine was started first, Arthur's Magazine or First for Women?"
GRAPH = "parallelsearch"


@pytest.fixture(scope="module")
def dev_server(hotpot_store, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("lgdev")
    store = copy_store(hotpot_store, tmp / "chroma")
    port = free_port()
    env = store_env(
        tmp, store, PARALLELSEARCH_STORES="hotpot", PARALLELSEARCH_POLICY=f"scripted:{script_file(tmp)}"
    )
    cmd = [str(BIN / "langgraph"), "dev", "--no-browser", "--no-reload", "--host", "127.0.0.1",
           "--port", str(port), "--config", str(ROOT / "langgraph.json")]  # fmt: skip
    srv = ServerProcess(cmd, env=env, cwd=tmp, log=tmp / "langgraph-dev.log", port=port, ready_path="/ok")
    srv.start()
    record("langgraph dev: start until GET /ok answers", srv.ready_s)
    yield srv
    t0 = time.perf_counter()
    code = srv.kill(signal.SIGTERM)
    record("langgraph dev: SIGTERM until the process group is gone", time.perf_counter() - t0)
    assert not srv.group_alive(), "langgraph dev left processes behind"
    assert code is not None


@pytest.fixture(scope="module")
def client(dev_server):
    from langgraph_sdk import get_sync_client

    return get_sync_client(url=dev_server.url, api_key=None, timeout=120)


#: shared libraries that say Chroma, torch or ONNX Runtime is loaded in a process
HEAVY_LIBRARIES = ("libtorch", "chromadb_rust_bindings", "onnxruntime")


def heavy_libraries(group: int) -> set[str]:
    """Which of :data:`HEAVY_LIBRARIES` any process of process group ``group`` has mapped."""
    found: set[str] = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            if int(stat.read_text().rpartition(")")[2].split()[2]) != group:
                continue
            maps = (stat.parent / "maps").read_text()
        except (OSError, ValueError, IndexError):  # a process that ended meanwhile
            continue
        found |= {lib for lib in HEAVY_LIBRARIES if lib in maps}
    return found


def import_seconds(log: str) -> float | None:
    """The Agent Server's own figure for importing the graph module (its slow-import warning fires at 3 s)."""
    plain = re.sub(r"\x1b\[[0-9;]*m", "", log)
    found = re.search(r"elapsed_seconds=([0-9.e-]+) graph_id=parallelsearch ", plain)
    return float(found.group(1)) if found else None


def test_the_graph_import_leaves_the_stores_to_the_first_search(dev_server, client):
    """The module langgraph.json names builds the graphs without Chroma, torch or the encoder (the
    server warns about an import over 3 s); they load when a run first searches."""
    log = dev_server.tail(200_000)
    seconds = import_seconds(log)
    assert seconds is not None, log[-2000:]
    record("langgraph dev: importing parallelsearch.langgraph_app (the server's figure)", seconds)
    assert heavy_libraries(dev_server.proc.pid) == set()
    out = client.runs.wait(None, GRAPH, input={"question": Q1})
    assert out["answer"] == "yes" and out["passages"] == 6 and out["errors"] == 0
    assert {"libtorch", "chromadb_rust_bindings"} <= heavy_libraries(dev_server.proc.pid)


def test_langgraph_json_is_complete_for_the_cli():
    from langgraph_cli.config import validate_config_file

    spec = json.loads((ROOT / "langgraph.json").read_text())
    assert {"dependencies", "graphs", "env", "python_version"} <= set(spec)
    cfg = validate_config_file(ROOT / "langgraph.json")
    assert set(cfg["graphs"]) == {"parallelsearch", "sequential", "rag", "dag"}
    assert cfg["python_version"] == "3.11"


def test_all_graphs_are_assistants_with_the_context_schema(client):
    info = client.http.get("/info")
    assert info["flags"].get("langsmith") is False  # offline: no LangSmith
    found = {a["graph_id"]: a for a in client.assistants.search(limit=20)}
    assert set(found) >= {"parallelsearch", "sequential", "rag"}
    schemas = client.assistants.get_schemas(found[GRAPH]["assistant_id"])  # needs the assistant's UUID
    ctx = schemas["context_schema"]["properties"]
    assert {"top_k", "max_turns", "max_subqueries", "max_new_tokens", "temperature", "top_p"} <= set(ctx)
    assert ctx["top_k"]["maximum"] == 100
    assert {"question", "metadata", "messages"} <= set(
        schemas["input_schema"]["properties"]
    )  # Studio's chat view
    assert {"answer", "messages"} <= set(schemas["output_schema"]["properties"])


def test_thread_stream_state_and_a_second_question(client):
    tid = client.threads.create()["thread_id"]
    parts = list(client.runs.stream(tid, GRAPH, input={"question": Q1}, stream_mode=["updates", "values"]))
    events = [p.event for p in parts]
    assert events[0] == "metadata" and "updates" in events and "values" in events
    nodes = [next(iter(p.data)) for p in parts if p.event == "updates"]
    assert nodes[:2] == ["begin", "planner"] and nodes.count("search") == 2 and nodes[-1] == "answer"
    last = [p.data for p in parts if p.event == "values"][-1]
    assert last["answer"] == "yes" and last["subqueries"] == 2 and last["passages"] == 6

    state = client.threads.get_state(tid)
    assert state["values"]["question"] == Q1 and state["values"]["answer"] == "yes" and state["next"] == []

    # a second question on the same thread: a fresh episode, the first kept in the thread and
    # shown to the policy as the conversation so far (the tags protocol writes it into the prompt)
    out = client.runs.wait(tid, GRAPH, input={"question": Q2})
    assert out["policy_calls"] == 2 and f"Question: {Q2}\n" in out["transcript"]
    assert f"User: {Q1}\nAssistant: yes\nQuestion: {Q2}\n" in out["transcript"]
    state = client.threads.get_state(tid)
    recs = state["values"]["history"]
    assert [(r["question"], r["answer"]) for r in recs] == [(Q1, "yes"), (Q2, "yes")]
    history = client.threads.get_history(tid, limit=50)
    firsts = [
        h for h in history if h["values"].get("question") == Q1 and h["values"].get("status") == "answered"
    ]
    assert firsts and Q1 in firsts[0]["values"]["transcript"]


def test_events_stream_and_per_run_context(client):
    parts = list(client.runs.stream(None, GRAPH, input={"question": Q1}, stream_mode="events"))
    evs = [p.data for p in parts if p.event == "events"]
    assert any(e["event"] == "on_chain_end" and e.get("name") == "search" for e in evs)
    # top_k per run through the context (LangGraph's runtime context = GraphContext)
    out = client.runs.wait(None, GRAPH, input={"question": Q1}, context={"top_k": 1})
    assert out["passages"] == 2 and out["answer"] == "yes"
    out = client.runs.wait(None, "sequential", input={"question": Q1}, context={"top_k": 2})
    assert out["status"] == "answered"
    # a bad value fails the run with the reason, instead of being ignored
    run = client.runs.wait(None, GRAPH, input={"question": Q1}, context={"top_k": 0}, raise_error=False)
    assert "invalid per-request graph configuration: top_k" in json.dumps(run), run


def test_dev_state_stays_in_the_working_directory(dev_server):
    """``langgraph dev`` keeps its threads in ``./.langgraph_api`` of its working directory."""
    assert (dev_server.cwd / ".langgraph_api").is_dir()
