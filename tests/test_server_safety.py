"""Both servers probed as an attacker and as a careless client would (real HTTP on 127.0.0.1, a
real store, the scripted policy or a stand-in OpenAI server). Each test failed on the code before:

- keys: a key of spaces opened ``serve`` on a network address and let an empty header in; one
  request could carry many keys; failures were never held back;
- web pages: ``text/plain`` bodies ran the graph (a cross-origin POST needs no preflight), any
  Host header was answered (DNS rebinding), ``/ui`` had no content security policy;
- secrets: a password in a policy URL was shown on ``/health`` and in errors;
- caps: an operator could not lower top_k, sub-queries or turns, nor bound the response;
- client mistakes: messages as ``{"role", "content"}`` or ``[role, content]``, a tool message
  without an id, NaN, ``__pregel_*`` keys were 500s; unknown keys and ``top_k: true`` ran;
  a failing model server was a bare 500.
"""

from __future__ import annotations

import argparse
import json
import logging
from typing import Annotated

import httpx
import pytest
from conftest import UvicornThread, free_port, needs_data
from servers import make_openai_test_server

from parallelsearch.agents.policies import ScriptedPolicy
from parallelsearch.cli import main
from parallelsearch.graphs.config import (
    PER_REQUEST_KEYS,
    GraphContext,
    OperatorCap,
    SearchTimeout,
    declared_caps,
)
from parallelsearch.serving.request_checks import RequestCaps
from parallelsearch.serving.server import create_app
from parallelsearch.settings import Settings
from parallelsearch.stores import create_retrieval_app
from parallelsearch.stores.http.api_key import key_problem

pytestmark = needs_data

SCRIPT = [
    "<think> t </think><search> Scott Derrickson ## Ed Wood </search>",
    "<think> t </think><answer> yes </answer>",
]
KEY = "k-" + "7" * 24
Q = {"input": {"question": "Were Scott Derrickson and Ed Wood of the same nationality?"}}


@pytest.fixture(scope="module")
def app_server(hotpot_store):
    settings = Settings(server_checkpointer="none", server_allowed_hosts=["localhost", "127.0.0.1", "::1"])
    with UvicornThread(create_app(settings, policy=ScriptedPolicy(SCRIPT), searcher=hotpot_store)) as srv:
        yield srv


def invoke(srv, body, path="/parallelsearch/invoke", **kw) -> httpx.Response:
    return httpx.post(srv.url + path, json=body, timeout=60, **kw)


# ---- keys ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("key", ["   ", "\t", ""])
def test_a_blank_server_key_is_no_key_and_a_network_bind_is_refused(nothing_binds, monkeypatch, capsys, key):
    monkeypatch.setenv("PARALLELSEARCH_SERVER_API_KEY", key)
    assert main(["serve", "--store", "no-such-store", "--host", "0.0.0.0"]) == 2
    assert capsys.readouterr().err.startswith("refusing to serve on 0.0.0.0 without an API key")
    assert Settings().server_api_key is None
    with pytest.raises(ValueError, match="empty"):
        key_problem([(b"x-api-key", b"")], key)  # a blank key never compares equal to a blank header


def test_an_empty_or_bare_header_is_a_missing_key():
    assert key_problem([(b"x-api-key", b"")], KEY) == "missing"
    assert key_problem([(b"authorization", b"Bearer")], KEY) == "missing"
    assert key_problem([(b"authorization", b"Bearer ")], KEY) == "missing"


def _keyed_retriever(hotpot_store, failures=None):
    return UvicornThread(create_retrieval_app(hotpot_store, api_key=KEY, key_failures=failures))


@pytest.mark.parametrize(
    "headers",
    [
        [("X-API-Key", "wrong"), ("X-API-Key", KEY)],
        [("X-API-Key", KEY), ("Authorization", f"Bearer {KEY}")],
        [("X-API-Key", f"w{i}") for i in range(2000)] + [("X-API-Key", KEY)],
    ],
    ids=["two-x-api-key", "both-headers", "thousands"],
)
def test_exactly_one_key_header_per_request_on_both_servers(hotpot_store, headers):
    app = create_app(
        Settings(server_api_key=KEY, server_checkpointer="none"),
        policy=ScriptedPolicy(SCRIPT),
        searcher=hotpot_store,
    )
    with _keyed_retriever(hotpot_store) as retriever, UvicornThread(app) as srv:
        r = httpx.post(
            retriever.url + "/retrieve", json={"queries": ["Ed Wood"]}, headers=headers, timeout=30
        )
        assert r.status_code == 400 and r.json()["problem"] == "several", r.text
        r = invoke(srv, Q, headers=headers)
        assert r.status_code == 400 and "exactly one API key header" in r.json()["detail"]
        assert invoke(srv, Q, headers={"X-API-Key": KEY}).status_code == 200


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_repeated_key_failures_from_one_address_are_held_back(hotpot_store):
    from parallelsearch.stores.http.api_key import KeyFailures

    clock = FakeClock()
    failures = KeyFailures(limit=3, window_s=60, clock=clock)
    body = {"queries": ["Ed Wood"]}
    with _keyed_retriever(hotpot_store, failures) as srv, httpx.Client(base_url=srv.url, timeout=30) as c:
        for _ in range(3):
            assert c.post("/retrieve", json=body, headers={"X-API-Key": "guess"}).status_code == 401
        held = c.post("/retrieve", json=body, headers={"X-API-Key": "guess"})  # the guesser waits
        assert held.status_code == 429 and held.json()["problem"] == "held_back"
        assert 1 <= int(held.headers["Retry-After"]) <= 60
        assert c.post("/retrieve", json=body, headers={"X-API-Key": KEY}).status_code == 200  # never the key
        clock.now += 61  # the window passes
        assert c.post("/retrieve", json=body, headers={"X-API-Key": "guess"}).status_code == 401
    # the LangServe app counts its own (settings: limit and window)
    s = Settings(server_api_key=KEY, server_checkpointer="none", server_key_failure_limit=2)
    app = create_app(s, policy=ScriptedPolicy(SCRIPT), searcher=hotpot_store)
    app.state.key_failures.clock = clock
    with UvicornThread(app) as srv:
        assert [invoke(srv, Q, headers={"X-API-Key": "x"}).status_code for _ in range(2)] == [401, 401]
        assert invoke(srv, Q, headers={"X-API-Key": "x"}).status_code == 429
        assert invoke(srv, Q, headers={"X-API-Key": KEY}).status_code == 200
        assert httpx.get(srv.url + "/health", timeout=10).status_code == 200  # /health stays open


# ---- what a web page could do --------------------------------------------------------------------
@pytest.mark.parametrize(
    "content_type",
    ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x", None],
)
def test_only_json_bodies_run_the_graph_or_search(app_server, hotpot_store, content_type):
    """A page may POST text/plain or a form to any origin without a preflight; neither runs anything."""
    headers = {"content-type": content_type} if content_type else {}
    r = httpx.post(
        app_server.url + "/parallelsearch/invoke", content=json.dumps(Q), headers=headers, timeout=30
    )
    assert r.status_code == 415 and "application/json" in r.json()["detail"]
    with UvicornThread(create_retrieval_app(hotpot_store)) as retriever:
        body = json.dumps({"queries": ["Ed Wood"]})
        r = httpx.post(retriever.url + "/retrieve", content=body, headers=headers, timeout=30)
        assert r.status_code == 415
    ok = httpx.post(
        app_server.url + "/parallelsearch/invoke",
        content=json.dumps(Q),
        headers={"content-type": "application/json; charset=utf-8"},
        timeout=60,
    )
    assert ok.status_code == 200


def test_a_foreign_host_header_is_refused(app_server):
    """A DNS-rebinding page reaches 127.0.0.1 under its own name: that name is refused."""
    for path in ("/stores", "/health", "/ui"):
        r = httpx.get(app_server.url + path, headers={"Host": "attacker.example"}, timeout=30)
        assert r.status_code == 400 and "attacker.example" in r.json()["detail"]
    r = invoke(app_server, Q, headers={"Host": "attacker.example:8080"})
    assert r.status_code == 400
    for host in (f"127.0.0.1:{app_server.port}", f"localhost:{app_server.port}", f"[::1]:{app_server.port}"):
        assert httpx.get(app_server.url + "/health", headers={"Host": host}, timeout=10).status_code == 200


def test_a_loopback_bind_answers_only_loopback_names_by_default():
    from parallelsearch.cli.common import bind_settings

    def args(host: str) -> argparse.Namespace:
        return argparse.Namespace(host=host)

    assert bind_settings(args("127.0.0.1"), Settings()).server_allowed_hosts == [
        "127.0.0.1",
        "::1",
        "localhost",
    ]
    assert bind_settings(args("0.0.0.0"), Settings()).server_allowed_hosts is None
    given = Settings(server_allowed_hosts="search.example, localhost")
    assert bind_settings(args("127.0.0.1"), given).server_allowed_hosts == ["search.example", "localhost"]


def test_the_page_is_sent_with_a_content_security_policy(app_server):
    r = httpx.get(app_server.url + "/ui", timeout=10)
    csp = r.headers["content-security-policy"]
    assert "default-src 'none'" in csp and "frame-ancestors 'none'" in csp and "connect-src 'self'" in csp
    assert csp.count("'sha256-") == 2 and "unsafe-inline" not in csp  # its one script and one style
    assert r.headers["x-content-type-options"] == "nosniff" and r.headers["x-frame-options"] == "DENY"


# ---- client mistakes: 4xx naming the field ----------------------------------------------------------
@pytest.mark.parametrize(
    "messages",
    [
        [{"role": "user", "content": "Were they both American?"}],
        [["human", "Were they both American?"]],
        [["user", "Were they both American?"]],
        ["Were they both American?"],
        [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Were they both American?"}],
    ],
    ids=["role-dict", "pair", "user-pair", "string", "system-then-user"],
)
def test_messages_in_every_form_langchain_accepts_run(app_server, messages):
    r = invoke(app_server, {"input": {"messages": messages}})
    assert r.status_code == 200, r.text[:300]
    out = r.json()["output"]
    assert out["answer"] == "yes" and out["messages"][-2]["type"] == "human"


@pytest.mark.parametrize(
    ("body", "status", "names"),
    [
        (
            {"input": {"messages": [
                {"type": "human", "content": "q?"},
                {"type": "ai", "content": "", "tool_calls": [{"name": "search", "args": {"query": "x"}, "id": "c1"}]},
                {"type": "tool", "content": "r"},
                {"type": "human", "content": "again?"},
            ]}},
            422,
            "messages[2].tool_call_id",
        ),  # fmt: skip
        ({"input": {"messages": [{"role": "wizard", "content": "q"}]}}, 422, "messages[0].role 'wizard'"),
        ({"input": {"messages": [["human"]]}}, 422, "messages[0] must be [role, content]"),
        ({**Q, "config": {"configurable": {"topk": 1}}}, 422, "unknown configurable key(s) 'topk' (did you mean 'top_k'?); known: top_k"),
        ({**Q, "config": {"configurable": {"__pregel_read": 1}}}, 422, "'__pregel_read'"),
        ({**Q, "config": {"configurable": {"__pregel_checkpointer": None}}}, 422, "'__pregel_checkpointer'"),
        ({**Q, "config": {"configurable": {"top_k": True}}}, 422, "configurable.top_k: Input should be a valid integer"),
        ({**Q, "config": {"configurable": {"top_k": "3"}}}, 422, "configurable.top_k"),
        ({**Q, "config": {"configurable": {"temperature": "hot"}}}, 422, "configurable.temperature"),
        ({**Q, "config": {"configurable": {"top_k": 0}}}, 422, "configurable.top_k"),
        ({**Q, "config": {"configurable": []}}, 422, "config.configurable must be an object"),
        ({"inputs": [Q["input"]], "config": [{"configurable": {"max_turns": "2"}}]}, 422, "configurable.max_turns"),
    ],
    ids=["tool-without-id", "unknown-role", "short-pair", "unknown-key", "pregel-read", "pregel-checkpointer",
         "top-k-true", "top-k-text", "temperature-text", "top-k-zero", "configurable-list", "batch-config"],
)  # fmt: skip
def test_client_mistakes_are_a_4xx_naming_the_field(app_server, body, status, names):
    path = "/parallelsearch/batch" if "inputs" in body else "/parallelsearch/invoke"
    r = invoke(app_server, body, path)
    assert r.status_code == status and names in r.json()["detail"], r.text[:400]


def test_non_json_numbers_are_a_400_on_both_servers(app_server, hotpot_store):
    for constant in ("NaN", "Infinity", "-Infinity"):
        body = (
            b'{"input": {"question": "q?"}, "config": {"configurable": {"temperature": %s}}}'
            % constant.encode()
        )
        r = httpx.post(
            app_server.url + "/parallelsearch/invoke",
            content=body,
            headers={"content-type": "application/json"},
            timeout=30,
        )
        assert r.status_code == 400 and f"{constant} is not a JSON value" in r.json()["detail"]
    with UvicornThread(create_retrieval_app(hotpot_store)) as retriever:
        r = httpx.post(
            retriever.url + "/retrieve",
            content=b'{"queries": ["Ed Wood"], "topk": NaN}',
            headers={"content-type": "application/json"},
            timeout=30,
        )
        assert r.status_code == 400 and "NaN" in r.json()["detail"]


def test_a_config_hash_is_checked_like_the_body(app_server):
    from langserve.lzstring import LZString

    bad = LZString.compressToEncodedURIComponent(json.dumps({"configurable": {"top_k": True}}))
    r = invoke(app_server, Q, f"/parallelsearch/c/{bad}/invoke")
    assert r.status_code == 422 and "configurable.top_k" in r.json()["detail"]
    r = invoke(app_server, Q, "/parallelsearch/c/not-a-hash/invoke")
    assert r.status_code == 400 and "config hash" in r.json()["detail"]


# ---- operator caps ---------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def capped(hotpot_store):
    settings = Settings(
        server_checkpointer="none",
        server_max_top_k=4,
        server_max_subqueries=5,
        server_max_turns=3,
        graph_config={"max_turns": 2, "max_subqueries": 4},
        server_max_response_bytes=6_000,
    )
    with UvicornThread(create_app(settings, policy=ScriptedPolicy(SCRIPT), searcher=hotpot_store)) as srv:
        yield srv


#: each of the capped server's knobs one over its cap, and what the refusal says after the knob's prefix
OVER_THE_CAPS = [
    ({"top_k": 5}, "top_k=5 exceeds this server's limit of 4 (server_max_top_k)"),
    ({"max_subqueries": 6}, "max_subqueries=6 exceeds this server's limit of 5"),
    ({"max_turns": 4}, "max_turns=4 exceeds this server's limit of 3 (server_max_turns)"),
]


@pytest.mark.parametrize(("configurable", "names"), OVER_THE_CAPS)
def test_operator_caps_refuse_a_request_before_it_runs(capped, configurable, names):
    r = invoke(capped, {**Q, "config": {"configurable": configurable}})
    assert r.status_code == 422 and f"configurable.{names}" in r.json()["detail"]
    assert httpx.get(capped.url + "/health", timeout=10).json()["admission"]["admitted"] == 0


def test_health_shows_the_operators_caps_as_the_knobs_maxima(capped):
    knobs = httpx.get(capped.url + "/health", timeout=10).json()["knobs"]
    assert (knobs["top_k"]["maximum"], knobs["max_subqueries"]["maximum"], knobs["max_turns"]["maximum"]) == (
        4,
        5,
        3,
    )
    assert knobs["top_k"]["minimum"] == 1


@pytest.mark.parametrize(("knobs", "names"), OVER_THE_CAPS)
def test_operator_caps_apply_to_the_openai_endpoint_too(capped, knobs, names):
    body = {"model": "parallelsearch", "messages": [{"role": "user", "content": Q["input"]["question"]}]}
    r = httpx.post(capped.url + "/v1/chat/completions", json={**body, "parallelsearch": knobs}, timeout=30)
    assert r.status_code == 400 and f"parallelsearch.{names}" in r.json()["error"]["message"]
    assert httpx.get(capped.url + "/health", timeout=10).json()["admission"]["admitted"] == 0


def test_a_field_named_inputs_outside_a_batch_is_no_server_error(capped):
    """Only a batch's ``inputs`` weighs on admission; elsewhere the name is just an extra field."""
    r = invoke(capped, {**Q, "inputs": 5, "config": {"configurable": {"top_k": 1}}})
    assert r.status_code == 200 and r.json()["output"]["answer"]


def test_the_response_size_cap_cuts_invoke_and_stream(capped):
    small = invoke(capped, {**Q, "config": {"configurable": {"top_k": 1}}})
    assert small.status_code == 200 and len(small.content) < 6_000
    big = invoke(capped, {**Q, "config": {"configurable": {"top_k": 4}}})
    assert big.status_code == 422 and "limit of 6000 bytes" in big.json()["detail"]
    with httpx.stream("POST", capped.url + "/parallelsearch/stream", json=Q, timeout=60) as r:
        text = "".join(r.iter_text())
    assert len(text.encode()) < 7_000 and text.rstrip().endswith("}")
    last = text.strip().split("\r\n\r\n")[-1]
    assert last.startswith("event: error") and '"status_code": 422' in last and "6000 bytes" in last


def test_caps_cannot_be_below_the_servers_own_graph():
    with pytest.raises(ValueError, match="graph_config.top_k=3 exceeds server_max_top_k=2"):
        Settings(server_max_top_k=2)


def test_a_per_request_knob_is_capped_or_says_why_not():
    """Every knob a request may set declares its operator cap (a settings field) or why it needs
    none; a new knob that declares neither is refused where it is declared, and a declared cap
    refuses like the others (a search timeout of 1e9 s does not pass)."""
    marks = declared_caps(GraphContext)
    assert set(marks) == set(PER_REQUEST_KEYS)
    assert all(m.setting in Settings.model_fields for m in marks.values() if isinstance(m, OperatorCap))

    class Timeout(GraphContext, total=False):
        search_timeout_s: SearchTimeout

    with pytest.raises(TypeError, match="'search_timeout_s' must declare one operator cap"):
        declared_caps(Timeout)

    class CappedTimeout(GraphContext, total=False):
        search_timeout_s: Annotated[SearchTimeout, OperatorCap("server_max_search_timeout_s")]

    setting = declared_caps(CappedTimeout)["search_timeout_s"].setting
    caps = RequestCaps({"search_timeout_s": (60.0, setting)})
    assert caps.problem({"search_timeout_s": 1e9}) == (
        "configurable.search_timeout_s=1000000000.0 exceeds this server's limit of 60.0 "
        "(server_max_search_timeout_s)"
    )
    assert caps.problem({"search_timeout_s": 5.0}) is None


# ---- secrets and upstream failures -------------------------------------------------------------------
def test_a_password_in_the_model_url_is_masked_and_a_dead_model_server_is_a_503(hotpot_store, caplog):
    port = free_port()  # nothing listens here
    app = create_app(
        Settings(server_checkpointer="none", request_timeout_s=5),
        policy=f"openai:m@http://alice:PASSW0RD@127.0.0.1:{port}/v1",
        searcher=hotpot_store,
    )
    with UvicornThread(app) as srv, caplog.at_level(logging.INFO):
        health = httpx.get(srv.url + "/health", timeout=10)
        assert "PASSW0RD" not in health.text and f"alice:***@127.0.0.1:{port}" in health.json()["policy"]
        r = invoke(srv, Q)
        assert r.status_code == 503 and r.json()["error_id"]
        detail = r.json()["detail"]
        assert f"http://127.0.0.1:{port}/v1/completions" in detail and "connection refused" in detail
        with httpx.stream("POST", srv.url + "/parallelsearch/stream", json=Q, timeout=60) as s:
            text = "".join(s.iter_text())
        error = json.loads(text.strip().split("\r\n\r\n")[-1].partition("data: ")[2])
        assert error["status_code"] == 503 and "connection refused" in error["message"]
    assert caplog.records and not any("PASSW0RD" in rec.getMessage() for rec in caplog.records)
    assert not any("PASSW0RD" in str(rec.exc_info) for rec in caplog.records if rec.exc_info)


def test_the_password_travels_as_basic_auth_and_a_failing_model_server_is_a_502(hotpot_store):
    import base64

    stand_in = make_openai_test_server()
    with UvicornThread(stand_in) as model:
        url = f"http://alice:PASSW0RD@127.0.0.1:{model.port}/v1"
        app = create_app(
            Settings(server_checkpointer="none"), policy=f"openai:m@{url}", searcher=hotpot_store
        )
        with UvicornThread(app) as srv:
            assert invoke(srv, Q).json()["output"]["answer"] == "yes"
    assert stand_in.state.auth[0] == "Basic " + base64.b64encode(b"alice:PASSW0RD").decode()

    from fastapi import FastAPI
    from fastapi.responses import JSONResponse

    broken = FastAPI()

    @broken.post("/v1/completions")
    async def fail():
        return JSONResponse({"error": "out of memory"}, status_code=500)

    with UvicornThread(broken) as model:
        url = f"http://127.0.0.1:{model.port}/v1"
        app = create_app(
            Settings(server_checkpointer="none"), policy=f"openai:m@{url}", searcher=hotpot_store
        )
        with UvicornThread(app) as srv:
            r = invoke(srv, Q)
    assert r.status_code == 502 and f"{url}/completions answered 500" in r.json()["detail"]


def _client_errors() -> list[tuple[Exception, int]]:
    """Each kind of model-server failure as the openai package and httpx raise it, with its status."""
    import openai

    req = httpx.Request("POST", "http://127.0.0.1:9/v1/chat/completions")
    answer = httpx.Response(500, request=req, json={"error": {"message": "overloaded"}})
    return [
        (openai.APITimeoutError(request=req), 504),  # a connection error too: the timeout wins
        (openai.APIConnectionError(request=req), 503),
        (openai.InternalServerError("overloaded", response=answer, body=None), 502),
        (httpx.ReadTimeout("slow", request=req), 504),
        (httpx.ConnectError("refused", request=req), 503),
        (httpx.HTTPStatusError("bad", request=req, response=answer), 502),
    ]


def test_each_kind_of_model_server_failure_has_its_status_from_either_client():
    from parallelsearch.serving.openai_errors import _http_problem

    for exc, status in _client_errors():
        got = _http_problem(exc)
        assert got is not None and got[0] == status, (type(exc).__name__, got)
        assert got[1].startswith("the model server") and "127.0.0.1:9" in got[1], got
    assert _http_problem(ValueError("not a client error")) is None
