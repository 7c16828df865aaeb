"""Options of ``parallelsearch serve`` and its OpenAI-compatible endpoint that chat clients rely on:
the usage chunk for every policy (estimated, and marked so, when the policy reports no tokens),
``--policy-base-url`` for a ``chat:`` policy's server, and misspelt per-request keys answered
with a 4xx naming them. Driven by the real ``openai`` client and ``httpx`` over HTTP on
loopback; the models are STAND-INS (the scripted chat model of tests/chat_stand_in.py, the
OpenAI-compatible chat TEST SERVER of tests/servers.py)."""

from __future__ import annotations

import httpx
import pytest
from chat_stand_in import Films, ScriptModel, calls
from conftest import UvicornThread

from parallelsearch.serving.server import create_app
from parallelsearch.settings import Settings

openai = pytest.importorskip("openai", reason="the openai client is in the dev extra")

QUESTION = "Who directed Inception, and when?"


def settings(tmp_path_factory, **kw) -> Settings:
    return Settings(home=tmp_path_factory.mktemp("home"), **{"server_checkpointer": "memory", **kw})


def client(srv: UvicornThread) -> openai.OpenAI:
    return openai.OpenAI(base_url=srv.url + "/v1", api_key="unused", max_retries=0, timeout=60)


@pytest.fixture(scope="module")
def silent(tmp_path_factory):
    """A server whose policy reports no token counts (a chat model without usage metadata)."""
    model = ScriptModel(replies=[calls("Inception director", "Inception year"), "Christopher Nolan in 2010"])
    with UvicornThread(create_app(settings(tmp_path_factory), policy=model, searcher=Films())) as srv:
        yield srv


def test_the_usage_chunk_comes_for_a_policy_that_reports_no_tokens(silent):
    chunks = list(
        client(silent).chat.completions.create(
            model="parallelsearch",
            messages=[{"role": "user", "content": QUESTION}],
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    last = chunks[-1]
    assert last.choices == [] and last.usage is not None  # the usage chunk, with numbers a client adds up
    spent = last.usage
    assert spent.prompt_tokens > spent.completion_tokens > 0
    assert spent.total_tokens == spent.prompt_tokens + spent.completion_tokens
    assert spent.model_extra == {"estimated": True}  # counted from the text, and said so
    assert all(c.usage is None for c in chunks[:-1])
    plain = client(silent).chat.completions.create(model="parallelsearch", messages=[{"role": "user", "content": "Who wrote Dune?"}])  # fmt: skip
    assert plain.usage.total_tokens > 0 and plain.usage.model_extra == {"estimated": True}


def test_a_chat_policy_reaches_the_server_policy_base_url_names(tmp_path_factory, monkeypatch):
    from servers import make_openai_chat_test_server

    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    upstream = make_openai_chat_test_server([["Inception director"], "Christopher Nolan"])
    keys: list[str | None] = []

    @upstream.middleware("http")
    async def record_key(request, call_next):
        keys.append(request.headers.get("authorization"))
        return await call_next(request)

    with UvicornThread(upstream) as up:
        s = settings(
            tmp_path_factory,
            policy="chat:openai:m",
            policy_base_url=up.url + "/v1",
            openai_api_key="sk-local",
        )
        with UvicornThread(create_app(s, searcher=Films())) as srv:
            reply = client(srv).chat.completions.create(model="parallelsearch", messages=[{"role": "user", "content": QUESTION}])  # fmt: skip
    assert reply.choices[0].message.content == "Christopher Nolan"
    assert len(upstream.state.requests) == 2 and set(keys) == {"Bearer sk-local"}
    assert upstream.state.requests[0]["tools"][0]["function"]["name"] == "search"  # the tools protocol


def test_policy_base_url_is_a_serve_flag_and_a_url(tmp_path):
    from parallelsearch.cli import build_parser
    from parallelsearch.cli.common import settings_from_args
    from parallelsearch.graphs.factory import make_policy

    url = "http://127.0.0.1:8000/v1"
    args = build_parser().parse_args(["serve", "--policy", "chat:openai:m", "--policy-base-url", url])
    s = settings_from_args(args, Settings(home=tmp_path, openai_api_key="sk-x"))
    assert s.policy_base_url == url
    assert str(make_policy(s.policy_config()).model.openai_api_base) == url
    with pytest.raises(ValueError, match="policy_base_url 'localhost:8000' must be an http"):
        make_policy(s.policy_config().model_copy(update={"policy_base_url": "localhost:8000"}))


@pytest.mark.parametrize(
    ("path", "body", "status", "names"),
    [
        (
            "/parallelsearch/invoke",
            {"input": {"question": "q?"}, "config": {"configurable": {"topk": 2}}},
            422,
            "'topk' (did you mean 'top_k'?)",
        ),
        (
            "/parallelsearch/stream",
            {"input": {"question": "q?"}, "config": {"configurable": {"max_turn": 2}}},
            422,
            "'max_turn' (did you mean 'max_turns'?)",
        ),
        (
            "/v1/chat/completions",
            {"model": "parallelsearch", "messages": [{"role": "user", "content": "q?"}], "parallelsearch": {"topk": 2}},
            400,
            "parallelsearch.topk is not a field (did you mean 'top_k'?)",
        ),
    ],
)  # fmt: skip
def test_a_misspelt_per_request_key_is_a_4xx_naming_it(silent, path, body, status, names):
    r = httpx.post(silent.url + path, json=body, timeout=30)
    assert r.status_code == status, r.text
    assert names in r.text
