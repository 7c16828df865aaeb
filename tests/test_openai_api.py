"""The OpenAI-compatible endpoint of ``parallelsearch serve``, driven by the real ``openai``
client over HTTP on loopback: models, plain and streamed completions with the search trace,
the API key and limits of the other routes, bad requests, conversations and threads, failing
model servers. The planner is a real ``ChatOpenAI`` against the local chat TEST SERVER of
tests/servers.py (no LLM runs here), or the scripted policy for the tags protocol."""

from __future__ import annotations

import json
import threading
import time

import httpx
import pytest
from conftest import UvicornThread, free_port
from engines import GatedPolicy
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from parallelsearch.serving.server import ROUTES, create_app
from parallelsearch.settings import Settings
from parallelsearch.stores import Passage

openai = pytest.importorskip("openai", reason="the openai client is in the dev extra")
pytest.importorskip("langchain_openai", reason="langchain-openai is in the dev extra")

#: the upstream chat model's script: one parallel search, then the answer (streamed word by word)
CHAT_SCRIPT = [["Inception director", "Inception year"], "Christopher Nolan in 2010"]
TAGS_SCRIPT = ["<think> t </think><search> Scott Derrickson ## Ed Wood </search>", "<answer> yes </answer>"]
QUESTION = "Who directed Inception, and when?"
#: the smallest valid chat request; a bad-request case adds or overrides one field
CHAT = {"model": "parallelsearch", "messages": [{"role": "user", "content": "q"}]}


class Films:
    """A searcher of ``k`` made-up passages per query (the endpoint, not retrieval, is tested)."""

    name = "films"

    async def asearch(self, query: str, k: int = 3) -> list[Passage]:
        return [
            Passage(f"{query}-{i}", query.title(), f"passage {i} about {query}", 0.9, self.name)
            for i in range(k)
        ]


def chat_model(url: str):
    """A ChatOpenAI against the test server, with its own async HTTP client: langchain-openai
    shares one per base URL, and each app here runs on its own event loop."""
    from langchain_openai import ChatOpenAI

    return ChatOpenAI(
        model="m",
        base_url=url + "/v1",
        api_key="sk-test",
        timeout=10,
        max_retries=0,
        stream_usage=True,
        http_async_client=httpx.AsyncClient(timeout=10),
    )


def client(srv: UvicornThread, key: str = "unused") -> openai.OpenAI:
    return openai.OpenAI(base_url=srv.url + "/v1", api_key=key, max_retries=0, timeout=60)


def streamed_with_usage(srv: UvicornThread) -> list:
    """Every chunk of a streamed answer to QUESTION that asks for the usage chunk at its end."""
    stream = client(srv).chat.completions.create(
        model="parallelsearch",
        messages=[{"role": "user", "content": QUESTION}],
        stream=True,
        stream_options={"include_usage": True},
    )
    return list(stream)


def settings(tmp_path_factory, **kw) -> Settings:
    return Settings(home=tmp_path_factory.mktemp("home"), **{"server_checkpointer": "memory", **kw})


@pytest.fixture(scope="module")
def upstream():
    """The chat TEST SERVER the planner talks to; its recorded requests."""
    from servers import make_openai_chat_test_server

    app = make_openai_chat_test_server(CHAT_SCRIPT)
    with UvicornThread(app) as srv:
        yield srv, app.state.requests


@pytest.fixture(scope="module")
def served(upstream, tmp_path_factory):
    app = create_app(settings(tmp_path_factory, server_max_question_chars=500), policy=chat_model(upstream[0].url), searcher=Films())  # fmt: skip
    with UvicornThread(app) as srv:
        yield srv


def asked(requests: list[dict], question: str) -> list[dict]:
    """The upstream requests whose last message is ``question`` (the planner's turns for it)."""
    return [r for r in requests if r["messages"][-1].get("content") == question]


def test_models_are_the_graph_routes(served):
    c = client(served)
    assert [m.id for m in c.models.list()] == list(ROUTES) == ["parallelsearch", "sequential", "rag", "dag"]
    assert c.models.retrieve("dag").owned_by == "parallelsearch"
    with pytest.raises(openai.NotFoundError, match="'gpt-4' does not exist"):
        c.models.retrieve("gpt-4")


def test_a_completion_is_the_answer_with_the_searches_beside_it(served, upstream):
    reply = client(served).chat.completions.create(
        model="parallelsearch",
        messages=[{"role": "system", "content": "Be brief."}, {"role": "user", "content": QUESTION}],
        extra_body={"parallelsearch": {"top_k": 2}},
    )
    choice = reply.choices[0]
    assert choice.message.content == "Christopher Nolan in 2010" and choice.finish_reason == "stop"
    assert choice.message.tool_calls is None  # the searches already ran: nothing for the client to call
    assert reply.usage.total_tokens == 30  # two model calls of 15 tokens (the test server's usage)
    trace = reply.model_extra["parallelsearch"]
    assert trace["status"] == "answered" and trace["search_rounds"] == 1 and trace["subqueries"] == 2
    assert [(s["query"], len(s["passages"])) for s in trace["searches"]] == [("Inception director", 2), ("Inception year", 2)]  # fmt: skip
    assert trace["searches"][1]["passages"][0]["text"] == "passage 0 about Inception year"
    call, tool1, tool2, final = trace["messages"]
    ids = [c["id"] for c in call["tool_calls"]]
    assert [json.loads(c["function"]["arguments"]) for c in call["tool_calls"]] == [{"query": "Inception director"}, {"query": "Inception year"}]  # fmt: skip
    assert [tool1["tool_call_id"], tool2["tool_call_id"]] == ids and tool1["role"] == "tool"
    assert "passage 0 about Inception director" in tool1["content"]
    assert final == {"role": "assistant", "content": "Christopher Nolan in 2010", "name": "parallelsearch"}
    first = asked(upstream[1], QUESTION)[0]["messages"]
    assert [m["role"] for m in first] == ["system", "user"] and first[0]["content"].startswith("Be brief.")


def test_a_stream_sends_the_models_tokens_as_they_come_and_the_searches_as_they_run(served):
    chunks = streamed_with_usage(served)
    assert chunks[0].choices[0].delta.role == "assistant"
    words = [c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content]
    assert words == ["Christopher", " Nolan", " in", " 2010"]  # the upstream's chunks, one by one
    events = [
        (i, c.model_extra["parallelsearch"])
        for i, c in enumerate(chunks)
        if "parallelsearch" in c.model_extra
    ]
    kinds = [e["event"] for _, e in events]
    assert kinds == ["search", "result", "result", "done"]
    assert events[0][1]["queries"] == ["Inception director", "Inception year"]
    assert events[0][1]["tool_calls"][0]["function"]["name"] == "search"
    assert sorted(e["query"] for _, e in events[1:3]) == ["Inception director", "Inception year"]
    first_word = next(i for i, c in enumerate(chunks) if c.choices and c.choices[0].delta.content)
    assert events[2][0] < first_word < events[3][0]  # passages before the answer, the trace last
    done = events[3][1]
    assert chunks[events[3][0]].choices[0].finish_reason == "stop" and done["status"] == "answered"
    assert done["messages"][-1]["content"] == "".join(words)
    assert chunks[-1].choices == [] and chunks[-1].usage.total_tokens == 30  # stream_options.include_usage


def test_a_text_protocol_streams_the_answer_not_its_tags(tmp_path_factory):
    """A chat model under the tags protocol streams tags: the reply is the answer alone."""
    from servers import make_openai_chat_test_server

    from parallelsearch.graphs.config import GraphConfig

    script = ["<search> Scott Derrickson ## Ed Wood </search>", "<answer> American, both </answer>"]
    s = settings(tmp_path_factory, graph_config=GraphConfig(protocol="tags"))

    def turn_of(messages: list[dict]) -> int:  # the observations so far (the prompt names the tag too)
        return sum(str(m.get("content")).count("<information>") for m in messages[1:] if m["role"] == "user")

    with UvicornThread(make_openai_chat_test_server(script, turn_of)) as up:
        with UvicornThread(create_app(s, policy=chat_model(up.url), searcher=Films())) as srv:
            c = client(srv)
            messages = [{"role": "user", "content": "Same nationality?"}]
            chunks = list(c.chat.completions.create(model="parallelsearch", messages=messages, stream=True))
            plain = c.chat.completions.create(model="parallelsearch", messages=messages)
    words = [ch.choices[0].delta.content for ch in chunks if ch.choices and ch.choices[0].delta.content]
    assert words == ["American, both"]  # not "<search>", " Scott", ...
    events = [ch.model_extra["parallelsearch"] for ch in chunks if "parallelsearch" in ch.model_extra]
    assert events[0] == {"event": "search", "round": 0, "queries": ["Scott Derrickson", "Ed Wood"]}
    assert plain.choices[0].message.content == "American, both"
    trace = plain.model_extra["parallelsearch"]
    assert trace["messages"] == [{"role": "assistant", "content": "American, both", "name": "parallelsearch"}]
    assert [s["query"] for s in trace["searches"]] == ["Scott Derrickson", "Ed Wood"]


def test_a_conversation_reaches_the_model_and_the_trace_can_be_sent_back(served, upstream):
    c = client(served)
    first = c.chat.completions.create(model="parallelsearch", messages=[{"role": "user", "content": "Who directed Inception?"}])  # fmt: skip
    said = first.choices[0].message.content
    # what chat frontends send: the earlier question and the answer, then the follow-up
    c.chat.completions.create(
        model="parallelsearch",
        messages=[
            {"role": "user", "content": "Who directed Inception?"},
            {"role": "assistant", "content": said},
            {"role": "user", "content": "Where was he born?"},
        ],
    )
    roles = [m["role"] for m in asked(upstream[1], "Where was he born?")[0]["messages"]]
    assert roles == ["system", "user", "assistant", "user"]
    # a client that keeps the trace sends back the searches too, as create_agent's record
    trace = first.model_extra["parallelsearch"]["messages"]
    c.chat.completions.create(
        model="parallelsearch",
        messages=[
            {"role": "user", "content": "Who directed Inception?"},
            *trace,
            {"role": "user", "content": "And his birthday?"},
        ],  # fmt: skip
    )
    sent = asked(upstream[1], "And his birthday?")[0]["messages"]
    assert [m["role"] for m in sent] == ["system", "user", "assistant", "tool", "tool", "assistant", "user"]
    assert sent[2]["tool_calls"][0]["function"]["arguments"] == '{"query": "Inception director"}'


def test_a_thread_keeps_the_conversation_on_the_server(served, upstream):
    c = client(served)
    thread = {"parallelsearch": {"thread_id": "openai-thread-1"}}
    one = c.chat.completions.create(model="parallelsearch", messages=[{"role": "user", "content": "Who made Tenet?"}], extra_body=thread)  # fmt: skip
    assert one.model_extra["parallelsearch"]["thread_id"] == "openai-thread-1"
    c.chat.completions.create(model="parallelsearch", messages=[{"role": "user", "content": "How old is he?"}], extra_body=thread)  # fmt: skip
    roles = [m["role"] for m in asked(upstream[1], "How old is he?")[0]["messages"]]
    assert roles == ["system", "user", "assistant", "tool", "tool", "assistant", "user"]
    state = httpx.get(served.url + "/parallelsearch/threads/openai-thread-1", timeout=10).json()
    assert state["question"] == "How old is he?" and state["episodes"] == 2


@pytest.mark.parametrize(
    ("body", "status", "names"),
    [
        ({"model": "parallelsearch"}, 400, "messages must be a non-empty list"),
        ({"model": "parallelsearch", "messages": []}, 400, "messages must be a non-empty list"),
        ({"messages": [{"role": "user", "content": "q"}]}, 400, "model is required"),
        ({"model": 5, "messages": [{"role": "user", "content": "q"}]}, 400, "model must be a string, got 5"),
        (
            {"model": "gpt-4o", "messages": [{"role": "user", "content": "q"}]},
            404,
            "model 'gpt-4o' does not exist",
        ),
        (
            {
                "model": "parallelsearch",
                "messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}],
            },
            400,
            "messages[1].role must be 'user'",
        ),
        (
            {"model": "parallelsearch", "messages": [{"role": "wizard", "content": "q"}]},
            400,
            "messages[0].role 'wizard'",
        ),
        (
            {"model": "parallelsearch", "messages": [{"role": "user", "content": "  "}]},
            400,
            "messages[0].content must not be empty",
        ),
        (
            {
                "model": "parallelsearch",
                "messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}],
            },
            400,
            "messages[0].content[0]: only text parts",
        ),
        (
            {
                "model": "parallelsearch",
                "messages": [{"role": "tool", "content": "x"}, {"role": "user", "content": "q"}],
            },
            400,
            "messages[0].tool_call_id",
        ),
        (
            {
                "model": "parallelsearch",
                "messages": [
                    {
                        "role": "assistant",
                        "tool_calls": [
                            {
                                "id": "c",
                                "type": "function",
                                "function": {"name": "search", "arguments": "{nope"},
                            }
                        ],
                    },
                    {"role": "user", "content": "q"},
                ],
            },
            400,
            "messages[0].tool_calls[0].function.arguments is not JSON",
        ),
        (
            {"model": "parallelsearch", "messages": [{"role": "user", "content": "x" * 501}]},
            413,
            "exceeds the limit of 500",
        ),
        (
            {**CHAT, "n": 2},
            400,
            "n=2 is not supported",
        ),
        (
            {**CHAT, "tools": [{"type": "function"}]},
            400,
            "tools=",
        ),
        (
            {**CHAT, "max_tokens": 0},
            400,
            "max_tokens:",
        ),
        (
            {**CHAT, "temperature": -1},
            400,
            "temperature:",
        ),
        (
            {**CHAT, "stream": "yes"},
            400,
            "stream must be",
        ),
        (
            {**CHAT, "parallelsearch": {"k": 3}},
            400,
            "parallelsearch.k is not a field (did you mean",
        ),
        (
            {**CHAT, "parallelsearch": {"top_k": 0}},
            400,
            "parallelsearch.top_k:",
        ),
        (
            {**CHAT, "parallelsearch": {"thread_id": "no spaces"}},
            400,
            "parallelsearch.thread_id:",
        ),
        ({**CHAT, "temperature": 7}, 400, "temperature: 7 is out of range"),
        ({**CHAT, "top_p": 1.5}, 400, "top_p: 1.5 is out of range"),
        ([1, 2], 400, "JSON object"),
    ],
)
def test_a_bad_request_is_a_4xx_naming_the_field_and_the_server_goes_on(served, body, status, names):
    r = httpx.post(served.url + "/v1/chat/completions", json=body, timeout=30)
    error = r.json()["error"]
    assert r.status_code == status and names in error["message"], r.text
    assert error["type"] == "invalid_request_error" and r.json()["detail"] == error["message"]
    ok = client(served).chat.completions.create(
        model="dag", messages=[{"role": "user", "content": "still there?"}]
    )
    assert ok.choices[0].message.content


def test_unknown_openai_fields_are_ignored_malformed_json_is_a_400_and_no_json_a_415(served):
    body = {"model": "parallelsearch", "messages": [{"role": "user", "content": "q?"}], "user": "u-1", "seed": 7,
            "stop": ["x"], "presence_penalty": 0.5, "logit_bias": {}, "tool_choice": "auto", "brand_new_field": 1}  # fmt: skip
    assert httpx.post(served.url + "/v1/chat/completions", json=body, timeout=30).status_code == 200
    json_type = {"content-type": "application/json"}
    r = httpx.post(served.url + "/v1/chat/completions", content=b"{nope", headers=json_type, timeout=30)
    assert r.status_code == 400 and r.json()["error"]["message"].startswith("malformed JSON")
    r = httpx.post(served.url + "/v1/chat/completions", content=b"{nope", timeout=30)
    assert r.status_code == 415 and "Content-Type: application/json" in r.json()["error"]["message"]


def test_the_key_and_the_body_limit_of_the_other_routes_apply(upstream, tmp_path_factory):
    s = settings(tmp_path_factory, server_api_key="s3cret", server_max_body_bytes=4000)
    with UvicornThread(create_app(s, policy=chat_model(upstream[0].url), searcher=Films())) as srv:
        body = {"model": "parallelsearch", "messages": [{"role": "user", "content": "q?"}]}
        missing = httpx.post(srv.url + "/v1/chat/completions", json=body, timeout=30)
        assert missing.status_code == 401 and missing.json()["error"]["type"] == "authentication_error"
        assert "missing API key" in missing.json()["error"]["message"]
        with pytest.raises(openai.AuthenticationError, match="wrong API key"):
            client(srv, "wrong").models.list()
        assert [m.id for m in client(srv, "s3cret").models.list()] == list(ROUTES)
        reply = client(srv, "s3cret").chat.completions.create(model="dag", messages=body["messages"])
        assert reply.choices[0].message.content == "Christopher Nolan in 2010"
        big = {**body, "messages": [{"role": "user", "content": "x" * 5000}]}
        with pytest.raises(openai.APIStatusError, match="exceeds the limit of 4000 bytes") as refused:
            client(srv, "s3cret").chat.completions.create(**big)
        assert refused.value.status_code == 413


def test_requests_beyond_the_admission_limit_are_a_429_with_retry_after(tmp_path_factory):
    policy = GatedPolicy(TAGS_SCRIPT)
    s = settings(tmp_path_factory, server_max_concurrency=1, server_queue_size=0)
    with UvicornThread(create_app(s, policy=policy, searcher=Films())) as srv:
        messages = [{"role": "user", "content": "q?"}]
        held: list = []
        first = threading.Thread(
            target=lambda: held.append(
                client(srv).chat.completions.create(model="parallelsearch", messages=messages)
            )
        )
        first.start()
        try:
            wait_for(lambda: httpx.get(srv.url + "/health", timeout=10).json()["admission"]["in_flight"] == 1)
            with pytest.raises(openai.RateLimitError, match="limit of 1 requests in flight") as refused:
                client(srv).chat.completions.create(model="parallelsearch", messages=messages, stream=True)
            assert int(refused.value.response.headers["retry-after"]) >= 1
            assert refused.value.body["type"] == "rate_limit_error"
        finally:
            policy.gate.set()
            first.join(60)
        assert held[0].choices[0].message.content == "yes"


def wait_for(predicate, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "the state the test needs did not come about"
        time.sleep(0.02)


def failing_upstream(ok_turns: list[str]) -> FastAPI:
    """A TEST SERVER for the chat and completions APIs that answers ``ok_turns`` (completions
    texts) and then 500 ``model overloaded``, as a model server under trouble does."""
    app = FastAPI()
    app.state.calls = 0

    def fail() -> JSONResponse:
        return JSONResponse({"error": {"message": "model overloaded", "type": "server_error"}}, 500)

    @app.post("/v1/chat/completions")
    async def chat(req: Request):
        return fail()

    @app.post("/v1/completions")
    async def completions(req: Request):
        app.state.calls += 1
        if app.state.calls > len(ok_turns):
            return fail()
        return {"choices": [{"text": ok_turns[app.state.calls - 1], "finish_reason": "stop"}], "usage": {}}

    return app


def test_a_failing_model_server_is_a_502_or_503_naming_it(tmp_path_factory):
    dead = f"http://127.0.0.1:{free_port()}"
    messages = [{"role": "user", "content": "q?"}]
    with UvicornThread(
        create_app(settings(tmp_path_factory), policy=chat_model(dead), searcher=Films())
    ) as srv:
        for stream in (False, True):  # a stream that fails before its first chunk has a status too
            with pytest.raises(openai.InternalServerError, match="cannot be reached") as down:
                client(srv).chat.completions.create(model="parallelsearch", messages=messages, stream=stream)
            assert down.value.status_code == 503 and dead in down.value.message
        invoked = httpx.post(
            srv.url + "/parallelsearch/invoke", json={"input": {"question": "q?"}}, timeout=30
        )
        assert invoked.status_code == 503 and "depends on is unreachable" in invoked.json()["detail"]
        assert dead in invoked.json()["detail"]
    with UvicornThread(failing_upstream([])) as up:
        app = create_app(settings(tmp_path_factory), policy=chat_model(up.url), searcher=Films())
        with UvicornThread(app) as srv:
            with pytest.raises(openai.InternalServerError, match="answered 500") as bad:
                client(srv).chat.completions.create(model="parallelsearch", messages=messages)
            assert bad.value.status_code == 502 and "model overloaded" in bad.value.message
            assert up.url in bad.value.message


def test_a_model_server_failing_mid_stream_ends_it_with_an_error_event(tmp_path_factory):
    with UvicornThread(failing_upstream(["<search> a ## b </search>"])) as up:
        policy = f"openai:m@{up.url}/v1"
        with UvicornThread(create_app(settings(tmp_path_factory), policy=policy, searcher=Films())) as srv:
            got = []
            stream = client(srv).chat.completions.create(model="parallelsearch", messages=[{"role": "user", "content": "q?"}], stream=True)  # fmt: skip
            with pytest.raises(openai.APIError, match="answered 500"):
                for chunk in stream:
                    got.append(chunk.model_extra.get("parallelsearch", {}).get("event"))
            assert "search" in got and "done" not in got  # the searches streamed, then the error


def test_openai_sampling_fields_and_the_extension_reach_the_graph(tmp_path_factory):
    from servers import make_openai_test_server

    upstream = make_openai_test_server()
    with UvicornThread(upstream) as up:
        app = create_app(settings(tmp_path_factory), policy=f"openai:m@{up.url}/v1", searcher=Films())
        with UvicornThread(app) as srv:
            reply = client(srv).chat.completions.create(
                model="parallelsearch",
                messages=[{"role": "user", "content": "q?"}],
                max_tokens=77,
                temperature=0.5,
                top_p=0.9,
                extra_body={"parallelsearch": {"top_k": 1, "max_turns": 2}},
            )
    sent = upstream.state.requests
    assert {(b["max_tokens"], b["temperature"], b["top_p"]) for b in sent} == {(77, 0.5, 0.9)}
    trace = reply.model_extra["parallelsearch"]
    assert [len(s["passages"]) for s in trace["searches"]] == [1, 1] and reply.choices[
        0
    ].message.content == "yes"


def test_a_history_cut_from_the_front_reaches_the_model_without_its_orphan_tool_messages(served, upstream):
    """A chat UI that cut its window inside a search sends tool messages whose call is gone: a
    strict provider refuses them, so the agent drops them."""
    c = client(served)
    reply = c.chat.completions.create(
        model="parallelsearch",
        messages=[
            {"role": "tool", "tool_call_id": "call_gone", "content": "an old result"},
            {"role": "assistant", "content": "an earlier answer"},
            {"role": "user", "content": "Who scored Dune?"},
        ],
    )
    assert reply.choices[0].message.content == "Christopher Nolan in 2010"
    sent = asked(upstream[1], "Who scored Dune?")[0]["messages"]
    assert [m["role"] for m in sent] == ["system", "user"]  # and the request starts at a question


def test_a_chat_policy_spec_streams_its_usage(tmp_path_factory, monkeypatch):
    """``--policy chat:openai:m``: the model the spec makes asks its server for the streamed
    usage, so the endpoint's usage chunk has the tokens."""
    from servers import make_openai_chat_test_server

    app = make_openai_chat_test_server(CHAT_SCRIPT)
    with UvicornThread(app) as up:
        monkeypatch.setenv("OPENAI_BASE_URL", up.url + "/v1")
        monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
        s = settings(tmp_path_factory, policy="chat:openai:m")
        with UvicornThread(create_app(s, searcher=Films())) as srv:
            chunks = streamed_with_usage(srv)
    assert chunks[-1].choices == [] and chunks[-1].usage.total_tokens == 30
    assert all(r["stream_options"] == {"include_usage": True} for r in app.state.requests)
