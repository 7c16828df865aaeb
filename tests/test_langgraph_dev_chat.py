"""The chat agent served by ``langgraph dev`` and driven with ``langgraph_sdk`` the way Agent Chat
UI drives it: the thread's messages are the conversation (the question, the AI message with its
parallel search calls, one tool message per call, the answer) and the ``messages-tuple`` stream
carries the model's chunks and the tool messages only. The planner is ``chat:openai:m``: a real
ChatOpenAI inside the server process, against a local OpenAI-compatible TEST SERVER (no LLM runs
here) on 127.0.0.1."""

from __future__ import annotations

import signal

import pytest
from conftest import ROOT, UvicornThread, free_port, needs_data
from serving import BIN, ServerProcess, copy_store, needs_langgraph_dev, store_env

pytestmark = [
    needs_data,
    pytest.mark.serving,
    pytest.mark.slow,
    needs_langgraph_dev,
]
Q = "Were Scott Derrickson and Ed Wood of the same nationality?"
ANSWER = "Yes, both were American."


@pytest.fixture(scope="module")
def chat_dev(hotpot_store, tmp_path_factory):
    from servers import make_openai_chat_test_server

    app = make_openai_chat_test_server([["Scott Derrickson", "Ed Wood"], ANSWER])
    with UvicornThread(app) as model_server:
        tmp = tmp_path_factory.mktemp("lgdevchat")
        store = copy_store(hotpot_store, tmp / "chroma")
        port = free_port()
        env = store_env(
            tmp,
            store,
            PARALLELSEARCH_STORES="hotpot",
            PARALLELSEARCH_POLICY="chat:openai:m",
            OPENAI_BASE_URL=model_server.url + "/v1",
            OPENAI_API_KEY="sk-test",
        )
        cmd = [str(BIN / "langgraph"), "dev", "--no-browser", "--no-reload", "--host", "127.0.0.1",
               "--port", str(port), "--config", str(ROOT / "langgraph.json")]  # fmt: skip
        srv = ServerProcess(cmd, env=env, cwd=tmp, log=tmp / "langgraph-dev.log", port=port, ready_path="/ok")
        srv.start()
        yield srv
        srv.kill(signal.SIGTERM)


@pytest.fixture(scope="module")
def client(chat_dev):
    from langgraph_sdk import get_sync_client

    return get_sync_client(url=chat_dev.url, api_key=None, timeout=120)


def test_the_threads_messages_are_the_conversation(client):
    tid = client.threads.create()["thread_id"]
    client.runs.wait(tid, "parallelsearch", input={"messages": [{"role": "user", "content": Q}]})
    messages = client.threads.get_state(tid)["values"]["messages"]
    assert [m["type"] for m in messages] == ["human", "ai", "tool", "tool", "ai"]
    ai, final = messages[1], messages[-1]
    assert [c["args"]["query"] for c in ai["tool_calls"]] == ["Scott Derrickson", "Ed Wood"]
    assert [m["tool_call_id"] for m in messages[2:4]] == [c["id"] for c in ai["tool_calls"]]
    assert messages[2]["content"].startswith("Doc 1(Title: Scott Derrickson)")
    assert final["content"] == ANSWER and final["name"] == "parallelsearch"


def test_the_messages_stream_is_what_a_chat_ui_shows(client):
    tid = client.threads.create()["thread_id"]
    parts = list(
        client.runs.stream(
            tid,
            "parallelsearch",
            input={"messages": [{"role": "user", "content": Q}]},
            stream_mode="messages-tuple",
        )
    )
    streamed = [p.data[0] for p in parts if p.event == "messages"]
    assert {m["type"] for m in streamed} <= {"AIMessageChunk", "ai", "tool"}
    assert not any("Answer the given question" in str(m.get("content")) for m in streamed)
    assert sum(1 for m in streamed if m["type"] == "tool") == 2
    final = client.threads.get_state(tid)["values"]["messages"][-1]
    tokens = "".join(
        str(m["content"]) for m in streamed if m["type"] == "AIMessageChunk" and m["id"] == final["id"]
    )
    assert tokens == ANSWER  # streamed under the id the thread keeps: a UI shows it once
