"""Cross-request batching of the /retrieve server: concurrent requests share one search.

Checked against the unbatched result of the same real store (HotpotQA paragraphs, real
Chroma, real MiniLM), with mixed ``topk``, a failing batch, and the batch bound counted
in encoder calls."""

from __future__ import annotations

import asyncio
import logging
import threading

import httpx
import pytest
from conftest import UvicornThread, needs_data

from parallelsearch.stores import create_retrieval_app
from parallelsearch.stores.http.request_batching import BatchSearchError, RequestBatcher

pytestmark = needs_data

QUERIES = [
    "Scott Derrickson",
    "Ed Wood",
    "Tyler Bates",
    "Adam Collis",
    "Doctor Strange director",
    "Woodson, Arkansas",
    "Kiss and Tell 1945 film",
    "nationality of Ed Wood",
    "Shirley Temple",
    "Sinister film",
]


def _ids(results):
    return [[(p.id, round(p.score, 5)) for p in res] for res in results]


class Recording:
    """The real store, with every search_batch call recorded; the first call can be held
    (so that the requests sent meanwhile queue up) and queries containing ``boom`` fail."""

    def __init__(self, store, hold_first: bool = False) -> None:
        self.store = store
        self.calls: list[tuple[list[str], int]] = []
        self.entered = threading.Event()
        self.release = threading.Event()
        if not hold_first:
            self.release.set()

    def search_batch(self, queries, k=3):
        self.calls.append((list(queries), k))
        self.entered.set()
        assert self.release.wait(30), "the test never released the held search"
        if any("boom" in q for q in queries):
            raise OSError("disk on fire")
        return self.store.search_batch(queries, k)


def _requests(n: int):
    """n requests of 1-3 queries with topk 1, 3 or 5."""
    return [([QUERIES[(i + j) % len(QUERIES)] for j in range(1 + i % 3)], (1, 3, 5)[i % 3]) for i in range(n)]


def test_concurrent_requests_with_mixed_topk_get_the_unbatched_results(hotpot_store):
    reqs = _requests(12)
    expected = [_ids(hotpot_store.search_batch(qs, k)) for qs, k in reqs]
    rec = Recording(hotpot_store, hold_first=True)
    batcher = RequestBatcher(rec, max_batch=64)

    async def run():
        first = asyncio.ensure_future(batcher.search(*reqs[0]))
        await asyncio.to_thread(rec.entered.wait, 30)  # the first batch runs; the others queue
        rest = [asyncio.ensure_future(batcher.search(qs, k)) for qs, k in reqs[1:]]
        await asyncio.sleep(0.05)
        rec.release.set()
        return await asyncio.wait_for(asyncio.gather(first, *rest), 60)

    got = asyncio.run(run())
    assert [_ids(r) for r in got] == expected
    assert [len(r) for r in got[2]] == [5, 5, 5]  # topk 5 served from the batch's search
    # request 0 alone, then the other 11 requests (23 queries, topk 1/3/5) as ONE search at k=5
    assert [len(q) for q, _ in rec.calls] == [1, 23] and rec.calls[1][1] == 5


def test_a_failing_batch_fails_only_its_requests(hotpot_store):
    rec = Recording(hotpot_store, hold_first=True)
    batcher = RequestBatcher(rec)

    async def run():
        first = asyncio.ensure_future(batcher.search(["Ed Wood"], 3))
        await asyncio.to_thread(rec.entered.wait, 30)
        queued = [
            asyncio.ensure_future(batcher.search(["Scott Derrickson"], 3)),
            asyncio.ensure_future(batcher.search(["boom", "Tyler Bates"], 2)),
        ]
        await asyncio.sleep(0.05)
        rec.release.set()
        done = await asyncio.wait_for(asyncio.gather(first, *queued, return_exceptions=True), 60)
        after = await asyncio.wait_for(batcher.search(["Adam Collis"], 1), 60)
        return done, after

    (ok, failed1, failed2), after = asyncio.run(run())
    assert ok[0][0].title == "Ed Wood"
    for err in (failed1, failed2):
        assert isinstance(err, BatchSearchError)
        assert "3 queries from concurrent requests failed: OSError: disk on fire" in str(err)
    assert after[0][0].title == "Adam Collis"  # the server goes on


def test_the_batch_bound_holds_in_encoder_calls(hotpot_store):
    """40 one-query requests and one of 20 queries queue behind a held search; max_batch=8."""
    rec = Recording(hotpot_store, hold_first=True)
    batcher = RequestBatcher(rec, max_batch=8)
    embedder = hotpot_store.embedder
    many = [QUERIES[i % len(QUERIES)] + f" {i}" for i in range(20)]

    async def run():
        first = asyncio.ensure_future(batcher.search(["Ed Wood"], 3))
        await asyncio.to_thread(rec.entered.wait, 30)
        calls_before = embedder.calls
        rest = [asyncio.ensure_future(batcher.search([f"{QUERIES[i % 10]} {i}"], 2)) for i in range(40)]
        big = asyncio.ensure_future(batcher.search(many, 3))
        await asyncio.sleep(0.05)
        rec.release.set()
        out = await asyncio.wait_for(asyncio.gather(first, big, *rest), 120)
        return out, embedder.calls - calls_before

    (first, big, *rest), encoder_calls = asyncio.run(run())
    sizes = [len(q) for q, _ in rec.calls]
    assert max(sizes) == 8 and sum(sizes) == 61 and len(rest) == 40
    # 60 queued queries in full batches of 8 (the last one 4), each one encoder call
    assert sizes[1:] == [8] * 7 + [4]
    assert encoder_calls == 1 + 8  # the held first batch encodes after the count was read
    assert [len(r) for r in big] == [3] * 20
    assert _ids(big) == _ids(hotpot_store.search_batch(many, 3))


def test_concurrent_http_requests_share_encoder_calls_and_match_unbatched(hotpot_store):
    reqs = _requests(16)
    expected = [[[p.id for p in res] for res in hotpot_store.search_batch(qs, k)] for qs, k in reqs]
    with UvicornThread(create_retrieval_app(hotpot_store, max_batch=64)) as srv:

        async def run():
            async with httpx.AsyncClient(timeout=60) as client:

                async def one(qs, k):
                    r = await client.post(srv.url + "/retrieve", json={"queries": qs, "topk": k})
                    assert r.status_code == 200, r.text
                    return [[d["id"] for d in docs] for docs in r.json()["result"]]

                return await asyncio.gather(*(one(qs, k) for qs, k in reqs))

        before = hotpot_store.embedder.calls
        got = asyncio.run(run())
        calls = hotpot_store.embedder.calls - before
    assert got == expected
    assert 1 <= calls < len(reqs), f"{len(reqs)} concurrent requests took {calls} encoder calls"


def test_a_failing_search_is_a_500_whose_logged_error_names_the_cause(hotpot_store, caplog):
    with UvicornThread(create_retrieval_app(Recording(hotpot_store))) as srv, caplog.at_level(logging.ERROR):
        r = httpx.post(srv.url + "/retrieve", json={"queries": ["boom"]}, timeout=30)
        assert r.status_code == 500 and r.json()["detail"] == "internal error"
        logged = [rec for rec in caplog.records if r.json()["error_id"] in rec.getMessage()]
        assert len(logged) == 1 and isinstance(logged[0].exc_info[1], BatchSearchError)
        assert "disk on fire" in str(logged[0].exc_info[1])
        ok = httpx.post(srv.url + "/retrieve", json={"queries": ["Ed Wood"], "topk": 1}, timeout=30)
        assert ok.status_code == 200


@pytest.mark.parametrize("max_batch", [0, 1])
def test_unbatched_and_batch_of_one_servers_answer_the_same(hotpot_store, max_batch):
    with UvicornThread(create_retrieval_app(hotpot_store, max_batch=max_batch)) as srv:
        body = httpx.post(
            srv.url + "/retrieve", json={"queries": ["Ed Wood", "Tyler Bates"], "topk": 2}, timeout=30
        ).json()
    assert [[d["id"] for d in docs] for docs in body["result"]] == [
        [p.id for p in res] for res in hotpot_store.search_batch(["Ed Wood", "Tyler Bates"], 2)
    ]


def test_batches_at_once_default_to_encoder_threads_plus_one_with_onnx():
    """ONNX encodes fast enough that a batch's Chroma query and answers are worth overlapping:
    one batch more than encoder threads; torch gets one per encoder thread."""
    from types import SimpleNamespace

    from parallelsearch.stores.http.retrieval_server import default_concurrent_batches

    for workers in (1, 2):
        for backend, extra in (("torch", 0), ("onnx", 1), ("onnx-int8", 1)):
            store = SimpleNamespace(embedder=SimpleNamespace(backend=backend, workers=workers))
            assert default_concurrent_batches(store) == workers + extra
            app = create_retrieval_app(store)
            assert app.state.batcher.concurrent_batches == workers + extra
    assert default_concurrent_batches(object()) == 1  # no embedder to ask: one encoder thread, torch's rule
    assert create_retrieval_app(store, concurrent_batches=5).state.batcher.concurrent_batches == 5
    with pytest.raises(ValueError, match="concurrent_batches must be >= 1, got 0"):
        create_retrieval_app(store, concurrent_batches=0)


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--concurrent-batches", "0"], "--concurrent-batches must be >= 1, got 0"),
        (["--max-batch", "-1"], "--max-batch must be >= 0, got -1"),
        (["--max-batch", "0", "--concurrent-batches", "2"], "--concurrent-batches needs batching"),
    ],
)
def test_serve_retriever_refuses_bad_batching_flags_before_opening_the_store(flags, message, capsys):
    import os

    from parallelsearch.cli import main

    spin = os.environ.get("GOMP_SPINCOUNT")
    assert main(["serve-retriever", "--store", "no-such-store", *flags]) == 2
    assert message in capsys.readouterr().err
    assert os.environ.get("GOMP_SPINCOUNT") == spin, "refused before touching the process's OpenMP settings"
