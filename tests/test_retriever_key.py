"""The ``/retrieve`` server with an API key, as a real ``parallelsearch serve-retriever`` process on 127.0.0.1.

Every route but ``/health`` needs the key (``X-API-Key`` or ``Authorization: Bearer``); a
network ``--host`` without one is refused before anything is bound; every client the
project has (the client class, ``eval``/``ask``/``rollout``, the LangGraph app, the
OpenRLHF agent executor) sends it from the settings; and the key is in no log line and no
file a run writes.
"""

from __future__ import annotations

import asyncio
import importlib
import json
import logging
import secrets
import sys

import httpx
import pytest
from conftest import free_port, needs_data
from serving import BIN, SCRIPT, ServerProcess, copy_store, record, script_file, store_env

from parallelsearch.cli import main
from parallelsearch.stores import RetrieverAuthError, RetrieverClient
from parallelsearch.stores.http.api_key import bind_problem, is_loopback, key_problem

pytestmark = [needs_data, pytest.mark.serving]

KEY = "rk-" + secrets.token_hex(16)
KEY_VAR = "PARALLELSEARCH_RETRIEVER_API_KEY"
QUESTION = "Were Scott Derrickson and Ed Wood of the same nationality?"
BODY = {"queries": ["Scott Derrickson", "Ed Wood"], "topk": 2, "return_scores": True}


@pytest.fixture(scope="module")
def keyed(hotpot_store, tmp_path_factory, _model_cache):
    """``serve-retriever`` over a copy of the store, its key from the setting (off the process list)."""
    tmp = tmp_path_factory.mktemp("keyed")
    store_dir = copy_store(hotpot_store, tmp / "chroma")
    port = free_port()
    # the model cache: the session's exported ONNX encoder
    env = store_env(tmp, store_dir, PARALLELSEARCH_MODEL_CACHE_DIR=str(_model_cache))
    env[KEY_VAR] = KEY
    # these tests send wrong keys on purpose from one address; holding it back is tested on its
    # own (tests/test_server_safety.py), so here failures are not counted
    env["PARALLELSEARCH_SERVER_KEY_FAILURE_LIMIT"] = "0"
    cmd = [str(BIN / "parallelsearch"), "serve-retriever", "--store", hotpot_store.name, "--port", str(port)]
    srv = ServerProcess(cmd, env=env, cwd=tmp, log=tmp / "retriever.log", port=port, ready_path="/health")
    srv.start()
    record("parallelsearch serve-retriever (API key): start until /health", srv.ready_s)
    try:
        yield srv
    finally:
        srv.kill()
        # nothing the server wrote (its log: stdout, stderr, access lines) holds the key
        assert KEY not in srv.log.read_text(errors="replace")
        assert srv.tail(), "the server wrote nothing: the log check above checked nothing"


@pytest.fixture()
def client_env(keyed, monkeypatch, tmp_path):
    """The settings every client command reads: the keyed server, its key, a scripted policy."""
    monkeypatch.setenv("PARALLELSEARCH_RETRIEVER_URL", keyed.url + "/retrieve")
    monkeypatch.setenv(KEY_VAR, KEY)
    monkeypatch.setenv("PARALLELSEARCH_POLICY", f"scripted:{script_file(tmp_path, SCRIPT)}")
    monkeypatch.delenv("PARALLELSEARCH_STORES", raising=False)
    return keyed


def _post(url: str, headers: dict[str, str] | None = None, **kw) -> httpx.Response:
    return httpx.post(url + "/retrieve", json=BODY, headers=headers, timeout=60, **kw)


# -- the server ---------------------------------------------------------------------------------
def test_no_key_is_401_with_a_json_body(keyed):
    r = _post(keyed.url)
    assert r.status_code == 401 and r.headers["content-type"] == "application/json"
    assert r.json()["problem"] == "missing" and "X-API-Key" in r.json()["detail"]
    assert r.headers["www-authenticate"] == "Bearer"


@pytest.mark.parametrize(
    "headers",
    [
        {"X-API-Key": "wrong"},
        {"Authorization": "Bearer wrong"},
        {"X-API-Key": KEY[:-1]},
        {"X-API-Key": KEY + "x"},
    ],
    ids=["x-api-key", "bearer", "prefix", "longer"],
)
def test_a_wrong_key_is_401_in_either_header(keyed, headers):
    r = _post(keyed.url, headers)
    assert r.status_code == 401 and r.json()["problem"] == "wrong"
    assert KEY not in r.text


@pytest.mark.parametrize(
    "headers",
    [{"X-API-Key": KEY}, {"Authorization": f"Bearer {KEY}"}, {"Authorization": f"bearer {KEY}"}],
    ids=["x-api-key", "bearer", "bearer-lower-case"],
)
def test_the_right_key_searches_in_either_header(keyed, headers):
    r = _post(keyed.url, headers)
    assert r.status_code == 200
    result = r.json()["result"]
    assert [row[0]["document"]["contents"].split("\n")[0] for row in result] == [
        '"Scott Derrickson"',
        '"Ed Wood"',
    ]


def test_health_is_open_and_says_a_key_is_required(keyed):
    body = httpx.get(keyed.url + "/health", timeout=30).json()
    assert body["status"] == "ok" and body["passages"] > 100 and body["api_key_required"] is True


@pytest.mark.parametrize("method,path", [("GET", "/docs"), ("GET", "/openapi.json"), ("GET", "/nowhere")])
def test_every_other_route_needs_the_key(keyed, method, path):
    assert httpx.request(method, keyed.url + path, timeout=30).status_code == 401
    assert httpx.request(method, keyed.url + path, headers={"X-API-Key": KEY}, timeout=30).status_code != 401


def test_the_key_is_checked_before_the_body_is_read(keyed):
    """Without the key a body over the 4 MB limit is a 401, not a 413: it was never read."""
    r = httpx.post(
        keyed.url + "/retrieve",
        content=b"[" * 5_000_000,
        headers={"content-type": "application/json"},
        timeout=60,
    )
    assert r.status_code == 401


# -- the client ---------------------------------------------------------------------------------
def test_client_with_the_key_searches_and_never_shows_it(keyed, caplog):
    caplog.set_level(logging.DEBUG)  # httpx/httpcore log every request at DEBUG
    client = RetrieverClient(keyed.url, api_key=KEY)
    assert client.search("Ed Wood", 1)[0].title == "Ed Wood"
    assert client.count() > 100
    assert KEY not in repr(client) and "**********" in repr(client)
    assert caplog.records and not any(KEY in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize(
    ("key", "why"), [(None, "no API key was sent"), ("wrong-key", "the API key sent is wrong")]
)
def test_a_401_is_one_clear_error_naming_the_url_and_is_not_retried(keyed, key, why):
    client = RetrieverClient(keyed.url, api_key=key, retries=3, backoff_s=0.01)
    with pytest.raises(RetrieverAuthError) as err:
        client.search("Ed Wood", 1)
    message = str(err.value)
    assert message.startswith(f"{keyed.url}/retrieve answered 401: {why}") and KEY_VAR in message
    assert "wrong-key" not in message
    assert client.requests == 1, "a refused key must not be retried"


# -- the commands, the LangGraph app and the OpenRLHF agent, with the key from the settings ------
def _files_hold_no_key(folder):
    files = [p for p in folder.rglob("*") if p.is_file()]
    assert files, f"{folder} holds no file: the check below checked nothing"
    for p in files:
        assert KEY.encode() not in p.read_bytes(), f"{p} holds the key"


def test_eval_ask_and_rollout_send_the_key_and_write_it_nowhere(
    client_env, hotpot_comparison_file, tmp_path, capsys, caplog
):
    caplog.set_level(logging.DEBUG)
    printed = []
    out = tmp_path / "run"
    eval_argv = ["eval", "--dataset", str(hotpot_comparison_file), "--limit", "2", "--graphs", "parallel"]
    assert main([*eval_argv, "--out", str(out), "--no-plots"]) == 0
    rows = [json.loads(x) for x in (out / "results.jsonl").read_text().splitlines()]
    assert len(rows) == 2 and all(r["error"] is None and r["passages"] > 0 for r in rows)
    printed.append(capsys.readouterr())

    assert main(["ask", QUESTION, "--json"]) == 0
    asked = capsys.readouterr()
    printed.append(asked)
    answer = json.loads(asked.out)
    assert answer["subqueries"] == 2 and answer["passages"] > 0

    episodes = tmp_path / "episodes.jsonl"
    assert (
        main(["rollout", "--data", str(hotpot_comparison_file), "--limit", "1", "--out", str(episodes)]) == 0
    )
    rec = json.loads(episodes.read_text().splitlines()[0])
    assert rec["error"] is None and rec["passages"] > 0
    printed.append(capsys.readouterr())

    _files_hold_no_key(tmp_path)
    assert not any(KEY in p.out + p.err for p in printed)
    assert not any(KEY in r.getMessage() for r in caplog.records)


def test_without_the_key_eval_stops_with_the_401_named(
    client_env, monkeypatch, hotpot_comparison_file, tmp_path, capsys
):
    monkeypatch.delenv(KEY_VAR)
    out = tmp_path / "run"
    argv = ["eval", "--dataset", str(hotpot_comparison_file), "--limit", "1", "--graphs", "parallel"]
    assert main([*argv, "--out", str(out), "--no-plots"]) == 2
    err = capsys.readouterr().err
    assert f"{client_env.url}/retrieve answered 401: no API key was sent" in err
    row = json.loads((out / "results.jsonl").read_text().splitlines()[0])
    assert "RetrieverAuthError" in row["error"]


def test_the_langgraph_app_reads_the_key_from_the_settings(client_env, monkeypatch):
    """``langgraph.json`` loads ``.env`` into the settings; the environment stands in for it here."""
    sys.modules.pop("parallelsearch.langgraph_app", None)
    mod = importlib.import_module("parallelsearch.langgraph_app")
    out = asyncio.run(mod.graph.ainvoke({"question": QUESTION}))
    assert out["passages"] > 0
    sys.modules.pop("parallelsearch.langgraph_app", None)


def _load_agent_executor():
    """What OpenRLHF's ``_load_agent_executor`` does: the module by path, ``AgentExecutor()``."""
    import importlib.util

    from parallelsearch.rl.launch import agent_module_path

    spec = importlib.util.spec_from_file_location("agent_module", str(agent_module_path()))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.AgentExecutor()


@pytest.mark.parametrize("where", ["environment", "file"])
def test_the_openrlhf_agent_searches_the_keyed_server(
    keyed, where, tmp_path, monkeypatch, tiny_lm, hotpot_questions
):
    pytest.importorskip("openrlhf", reason="the agent executor subclasses OpenRLHF's AgentExecutorBase")
    from engines import ScriptedEngine

    from parallelsearch.rl.agent_config import ENV_VAR
    from parallelsearch.rl.data import train_record

    _, tok = tiny_lm
    path = tmp_path / "agent.yaml"
    text = f"retriever_url: {keyed.url}/retrieve\ngraph_config:\n  top_k: 2\n  max_turns: 3\n  max_new_tokens: 64\n"
    if where == "file":
        text += f"retriever_api_key: '{KEY}'\n"
        monkeypatch.delenv(KEY_VAR, raising=False)
    else:
        monkeypatch.setenv(KEY_VAR, KEY)
    path.write_text(text)
    monkeypatch.setenv(ENV_VAR, str(path))
    q = next(q for q in hotpot_questions if q["metadata"]["type"] == "comparison")
    a, b = q["metadata"]["supporting_titles"][:2]
    rec = train_record(q)
    engine = ScriptedEngine(
        tok, [f"<search> {a} ## {b} </search>", f"<answer> {q['golden_answers'][0]} </answer>"]
    )
    executor = _load_agent_executor()
    assert KEY not in repr(executor.config) and KEY not in executor.config.model_dump_json()

    class Sampling:  # vLLM SamplingParams' field names (vLLM is not installed in this tier)
        temperature, top_p, max_tokens, logprobs, stop, include_stop_str_in_output = (
            1.0,
            1.0,
            None,
            1,
            [],
            False,
        )

    result = asyncio.run(executor.execute(rec["prompt"], rec["label"], Sampling(), 4096, tok, engine))
    obs = tok.decode(engine.requests[1][result["action_ranges"][0][1] :])
    assert f'(Title: "{a}")' in obs and f'(Title: "{b}")' in obs
    assert result["reward"] > 0


def test_the_agent_without_the_key_fails_its_first_search_with_the_401(keyed, tmp_path, monkeypatch):
    from parallelsearch.rl.agent_config import load_agent_config

    monkeypatch.delenv(KEY_VAR, raising=False)
    path = tmp_path / "agent.yaml"
    path.write_text(f"retriever_url: {keyed.url}/retrieve\n")
    searcher = load_agent_config(path).make_searcher()
    with pytest.raises(RetrieverAuthError, match="no API key was sent"):
        asyncio.run(searcher.asearch("Ed Wood", 1))


def test_the_train_launcher_never_writes_the_key(monkeypatch):
    from parallelsearch.rl.train_config import paper_preset

    monkeypatch.setenv(KEY_VAR, KEY)
    cfg = paper_preset()
    assert cfg.agent.retriever_api_key is not None
    text = cfg.agent_config_yaml()
    assert KEY not in text and "**********" not in text and KEY_VAR in text


# -- binding: a network address needs a key ------------------------------------------------------
@pytest.fixture()
def nothing_binds(nothing_binds, monkeypatch):
    """conftest's ``nothing_binds``, with no key in the environment (each test sets the one it means)."""
    monkeypatch.delenv(KEY_VAR, raising=False)
    monkeypatch.delenv("PARALLELSEARCH_SERVER_API_KEY", raising=False)


@pytest.mark.parametrize("command", ["serve-retriever", "serve"])
@pytest.mark.parametrize("host", ["0.0.0.0", "::", "10.1.2.3"])
def test_a_network_host_without_a_key_is_refused_before_binding(nothing_binds, capsys, command, host):
    assert main([command, "--store", "no-such-store", "--host", host]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    var = KEY_VAR if command == "serve-retriever" else "PARALLELSEARCH_SERVER_API_KEY"
    assert err[0].startswith(f"refusing to serve on {host} without an API key")
    assert "--api-key" in err[0] and var in err[0] and "--insecure-no-key" in err[0]


@pytest.mark.parametrize(
    "extra,env,warned",
    [(["--insecure-no-key"], None, True), (["--api-key", "k"], None, False), ([], "k", False)],
    ids=["insecure-no-key", "flag", "setting"],
)
def test_a_key_or_insecure_no_key_passes_the_check(nothing_binds, monkeypatch, capsys, extra, env, warned):
    """Past the check the command opens the store, which is missing: it stops there, unbound."""
    if env:
        monkeypatch.setenv(KEY_VAR, env)
    assert main(["serve-retriever", "--store", "no-such-store", "--host", "0.0.0.0", *extra]) == 2
    err = capsys.readouterr().err
    assert "refusing" not in err and "no-such-store" in err
    assert ("warning: serving on 0.0.0.0 without an API key" in err) is warned


def test_loopback_hosts_need_no_key():
    assert all(is_loopback(h) for h in ("127.0.0.1", "127.0.1.1", "::1", "[::1]", "localhost", "LOCALHOST"))
    assert not any(is_loopback(h) for h in ("0.0.0.0", "::", "", "10.0.0.1", "example.org"))
    assert bind_problem("127.0.0.1", False, insecure_no_key=False, how_to_set="x") is None


def test_key_problem_reads_both_headers():
    assert key_problem([], "k") == "missing"
    assert key_problem([(b"authorization", b"Basic abc")], "k") == "missing"
    assert key_problem([(b"x-api-key", b"k")], "k") is None
    assert key_problem([(b"authorization", b"Bearer k")], "k") is None
    assert key_problem([(b"x-api-key", b"no"), (b"authorization", b"Bearer k")], "k") == "several"
    assert key_problem([(b"x-api-key", b"no")], "k") == "wrong"


# -- the setting ---------------------------------------------------------------------------------
def test_the_setting_is_a_secret_everywhere_it_is_shown(monkeypatch):
    from parallelsearch.settings import get_settings
    from parallelsearch.stores.config import RetrievalConfig

    monkeypatch.setenv(KEY_VAR, KEY)
    s = get_settings()
    assert s.retriever_api_key is not None and s.retriever_api_key.get_secret_value() == KEY
    cfg = s.retrieval()
    assert cfg.retriever_api_key.get_secret_value() == KEY
    for shown in (repr(s), str(s), repr(cfg), cfg.model_dump_json(), json.dumps(cfg.model_dump(mode="json"))):
        assert KEY not in shown
    monkeypatch.setenv(KEY_VAR, "  ")
    assert get_settings().retriever_api_key is None  # an empty setting is no key
    assert RetrievalConfig(retriever_api_key=1234).retriever_api_key.get_secret_value() == "1234"


def test_the_search_guard_stops_on_a_refused_key_at_the_first_attempt():
    """Other searcher failures become an error entry after a retry; a refused key is raised at once."""
    from parallelsearch.agents.searchers import guarded_search

    class Refusing:
        calls = 0

        async def asearch(self, query, k=3):
            self.calls += 1
            raise RetrieverAuthError("http://h/retrieve answered 401: no API key was sent")

    searcher = Refusing()
    with pytest.raises(RetrieverAuthError):
        asyncio.run(guarded_search(searcher, "q", 1, retries=3, backoff_s=0))
    assert searcher.calls == 1
