"""The Search-R1 /retrieve server over real HTTP, with a client written to Search-R1's request shape."""

from __future__ import annotations

import asyncio

import httpx
import pytest
from conftest import UvicornThread, needs_data

from parallelsearch.stores import RetrieverClient, RetrieverError, create_retrieval_app

pytestmark = needs_data


@pytest.fixture(scope="module")
def server(hotpot_store):
    with UvicornThread(create_retrieval_app(hotpot_store, max_queries=8, max_query_chars=200)) as srv:
        yield srv


def test_search_r1_request_shape_with_scores(server):
    # exactly what Search-R1's generation.py sends
    payload = {"queries": ["Scott Derrickson", "Ed Wood"], "topk": 3, "return_scores": True}
    body = httpx.post(server.url + "/retrieve", json=payload, timeout=30).json()
    assert len(body["result"]) == 2 and all(len(r) == 3 for r in body["result"])
    top = body["result"][0][0]
    assert set(top) == {"document", "score"} and set(top["document"]) == {"id", "contents"}
    assert top["document"]["contents"].startswith('"Scott Derrickson"\n')
    # the official code's title extraction on our contents
    assert top["document"]["contents"].split("\n")[0] == '"Scott Derrickson"'


def test_without_scores_returns_bare_documents(server):
    body = httpx.post(server.url + "/retrieve", json={"queries": ["Ed Wood"], "topk": 2}, timeout=30).json()
    assert set(body["result"][0][0]) == {"id", "contents"}


def test_health(server, hotpot_store):
    body = httpx.get(server.url + "/health", timeout=10).json()
    assert body["status"] == "ok" and body["passages"] > 100
    # what the server searches, for a trainer to check before it trusts it (train --check)
    assert body["model"] == hotpot_store.embedder.model_name and body["dimension"] == 384
    assert body["query_prefix"] == "" and body["fingerprint"] == hotpot_store.fingerprint()
    assert body["fingerprint"].startswith("sha256:") and len(body["fingerprint"]) == 23


@pytest.mark.parametrize(
    "payload,status,needle",
    [
        ({"queries": ["x"] * 9}, 413, "too many queries"),
        ({"queries": ["x" * 201]}, 413, "limit is 200"),
        ({"queries": []}, 422, "at least one"),
        ({"queries": ["x"], "topk": 0}, 422, "topk"),
        ({"queries": "not a list"}, 422, "invalid request"),
        ({"topk": 3}, 422, "invalid request"),
    ],
)
def test_limits_and_bad_requests_are_4xx_with_a_message(server, payload, status, needle):
    r = httpx.post(server.url + "/retrieve", json=payload, timeout=10)
    assert r.status_code == status and needle in r.text
    # the server still answers the next good request
    assert httpx.post(server.url + "/retrieve", json={"queries": ["Ed Wood"]}, timeout=30).status_code == 200


def test_malformed_json_is_a_400_naming_where_it_broke(server):
    r = httpx.post(
        server.url + "/retrieve", content=b"{nope", headers={"content-type": "application/json"}, timeout=10
    )
    assert r.status_code == 400 and r.json()["detail"].startswith("malformed JSON: ")


def test_client_roundtrip_and_coalescing(server):
    client = RetrieverClient(server.url + "/retrieve", timeout_s=30)
    hits = client.search("Scott Derrickson", 2)
    assert hits[0].title == "Scott Derrickson" and hits[0].score is not None

    async def run():
        return await asyncio.gather(
            *(client.asearch(q, 1) for q in ["Ed Wood", "Adam Collis", "Tyler Bates"])
        )

    before = client.requests
    res = asyncio.run(run())
    assert [r[0].title for r in res] == ["Ed Wood", "Adam Collis", "Tyler Bates"]
    assert client.requests == before + 1, "three concurrent queries must travel in one request"
    assert client.count() > 100


def test_client_errors_are_clear(server):
    with pytest.raises(RetrieverError, match="413"):
        RetrieverClient(server.url).search_batch(["x" * 500], 1)
    dead = RetrieverClient("http://127.0.0.1:9/retrieve", timeout_s=1, retries=1, backoff_s=0.01)
    with pytest.raises(RetrieverError, match="failed after 2 attempts"):
        dead.search("x")


def test_clients_share_one_tls_context(server, monkeypatch):
    """httpx builds a TLS context (40-80 ms here) for every client it is not given one;
    the retriever client passes the process's shared one, so a search does not pay that."""
    import ssl

    made = []
    real = ssl.create_default_context
    monkeypatch.setattr(ssl, "create_default_context", lambda *a, **kw: made.append(1) or real(*a, **kw))
    client = RetrieverClient(server.url)
    for q in ["Ed Wood", "Scott Derrickson", "Tyler Bates"]:
        assert client.search(q, 1)
    assert client.health()["status"] == "ok"
    assert len(made) <= 1  # at most the shared context itself, if no earlier test made it


def _official_client_observation(url: str, action_query: str, topk: int) -> str:
    """The <information> block the official rollout code builds for a search action, derived from
    our server's HTTP response as its client does (documented behaviour, see docs/architecture.md
    "The protocol"): sub-queries split on '##' and sent as they are, each document rendered as
    'Doc i(Title: <first line of contents, verbatim>) <the other lines>', one block, stripped."""
    queries = action_query.split("##")
    body = httpx.post(
        url + "/retrieve", json={"queries": queries, "topk": topk, "return_scores": True}, timeout=30
    )
    parts = []
    for docs in body.json()["result"]:
        for i, item in enumerate(docs, 1):
            first, _, rest = item["document"]["contents"].partition("\n")
            parts.append(f"Doc {i}(Title: {first}) {rest}\n")
    return "\n\n<information>" + "".join(parts).strip() + "</information>\n\n"


@pytest.mark.parametrize("via", ["store", "retrieve"])
def test_official_template_observation_is_byte_identical_to_the_official_client(server, hotpot_store, via):
    """Released checkpoints were trained on the official rendering (quoted wiki-18 titles); with the
    official template our graph's observation is the same bytes, from a local store or over /retrieve."""
    from parallelsearch.agents.policies import ScriptedPolicy
    from parallelsearch.graphs import build_parallel_search_graph

    action = "<think> t </think>\n<search>Scott Derrickson##Ed Wood</search>"
    searcher = hotpot_store if via == "store" else server.url
    graph = build_parallel_search_graph(
        ScriptedPolicy([action, "<answer> yes </answer>"]), searcher, prompt_template="official", top_k=2
    )
    out = asyncio.run(
        graph.ainvoke({"question": "Were Scott Derrickson and Ed Wood of the same nationality?"})
    )
    ours = next(s for s in out["trajectory"] if s["type"] == "observation")["text"]
    assert ours == _official_client_observation(server.url, "Scott Derrickson##Ed Wood", 2)
    # the exact bytes of its start, pinned
    assert ours.startswith(
        '\n\n<information>Doc 1(Title: "Scott Derrickson") Scott Derrickson (born July 16, 1966) is an American '
        "director, screenwriter and producer."
    )
    assert '\nDoc 1(Title: "Ed Wood") ' in ours and ours.count("Doc 2(Title: ") == 2
    # the stripped form stays available, and is the default with the paper template
    plain = build_parallel_search_graph(ScriptedPolicy([action, "<answer> yes </answer>"]), searcher, top_k=2)
    text = asyncio.run(plain.ainvoke({"question": "q?"}))["transcript"]
    assert (
        "Doc 1(Title: Scott Derrickson) " in text
        and '"Scott Derrickson"' not in text.split("<information>")[1]
    )
