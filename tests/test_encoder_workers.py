"""Several encoder threads (``encoder_workers``): calls run at once, each thread's OpenMP team
is sized by ``encoder_threads``, the shared tokenizer survives concurrent batches, and the
``/retrieve`` batcher sends that many batches at once."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from conftest import needs_data

from parallelsearch.stores import encoder_thread
from parallelsearch.stores.encoder_thread import (
    on_encoder_thread,
    set_encoder_threads,
    set_encoder_workers,
    split_on_encoder_threads,
)
from parallelsearch.stores.http.request_batching import RequestBatcher


@pytest.fixture
def restore_encoder():
    """Put the process's encoder configuration back (other tests share it)."""
    import torch

    workers, threads = encoder_thread.encoder_workers(), on_encoder_thread(torch.get_num_threads)
    yield
    set_encoder_workers(workers)
    set_encoder_threads(threads)


def _meet(barrier: threading.Barrier) -> str:
    barrier.wait()  # raises BrokenBarrierError unless another call is running at the same time
    return threading.current_thread().name


def test_two_workers_run_two_calls_at_once_and_one_runs_them_in_turn(restore_encoder):
    set_encoder_workers(1)
    barrier = threading.Barrier(2, timeout=1)
    with ThreadPoolExecutor(2) as callers:
        futs = [callers.submit(on_encoder_thread, _meet, barrier) for _ in range(2)]
        with pytest.raises(threading.BrokenBarrierError):
            [f.result(timeout=30) for f in futs]

    set_encoder_workers(2)
    barrier = threading.Barrier(2, timeout=30)
    with ThreadPoolExecutor(2) as callers:
        names = [
            f.result(timeout=60)
            for f in [callers.submit(on_encoder_thread, _meet, barrier) for _ in range(2)]
        ]
    assert len(set(names)) == 2 and all(n.startswith("parallelsearch-encoder") for n in names)


def test_every_worker_gets_the_configured_team_size(restore_encoder):
    import torch

    set_encoder_workers(2)
    set_encoder_threads(1)
    barrier = threading.Barrier(2, timeout=30)

    def team() -> int:
        barrier.wait()  # both workers answer, not one twice
        return torch.get_num_threads()

    with ThreadPoolExecutor(2) as callers:
        sizes = [f.result(timeout=60) for f in [callers.submit(on_encoder_thread, team) for _ in range(2)]]
    assert sizes == [1, 1]


def test_several_workers_without_a_team_size_share_the_cores(restore_encoder, monkeypatch):
    """Two full-width teams on the same cores would mostly wait on each other: with N workers
    and no --encoder-threads, each team is cores / N (at least 1); one worker keeps torch's."""
    import os

    import torch

    monkeypatch.setattr(encoder_thread, "_threads", None)
    set_encoder_workers(2)
    share = max(1, (os.cpu_count() or 1) // 2)
    assert encoder_thread.team_size() == share
    assert on_encoder_thread(torch.get_num_threads) == share
    set_encoder_workers(1)
    assert encoder_thread.team_size() is None


def test_bad_worker_and_thread_counts_are_refused():
    with pytest.raises(ValueError, match="encoder workers must be >= 1"):
        set_encoder_workers(0)
    with pytest.raises(ValueError, match="encoder threads must be >= 1"):
        set_encoder_threads(0)


@needs_data
def test_concurrent_batches_on_two_workers_match_serial_encoding(embedder, restore_encoder):
    """The tokenizer is shared by the workers: concurrent batches must neither fail nor mix."""
    texts = [f"who directed film number {i} of the festival in {1900 + i}?" for i in range(48)]
    batches = [texts[i : i + 1 + i % 5] for i in range(0, 48, 3)]
    set_encoder_workers(1)
    expected = [embedder.encode_queries(b) for b in batches]
    set_encoder_workers(2)
    set_encoder_threads(1)
    with ThreadPoolExecutor(8) as callers:
        got = list(callers.map(embedder.encode_queries, batches * 3))
    for e, g in zip(expected * 3, got, strict=True):
        np.testing.assert_allclose(g, e, atol=1e-5)


def test_one_batch_is_split_over_the_encoder_threads_and_runs_on_all_at_once(restore_encoder):
    """A batch of 5 on 2 encoder threads: parts of 3 and 2, each on its own thread, at once
    (the barrier breaks unless both run together); in order; one thread or one item: one call."""
    set_encoder_workers(2)
    barrier = threading.Barrier(2, timeout=30)

    def part(items: list[int]) -> tuple[list[int], str]:
        barrier.wait()
        return items, threading.current_thread().name

    got = split_on_encoder_threads(part, [1, 2, 3, 4, 5])
    assert [items for items, _ in got] == [[1, 2, 3], [4, 5]]
    assert len({name for _, name in got}) == 2
    assert split_on_encoder_threads(lambda items: items, [7]) == [[7]]
    set_encoder_workers(1)
    assert split_on_encoder_threads(lambda items: items, [1, 2, 3]) == [[1, 2, 3]]


def test_a_split_called_from_an_encoder_thread_runs_there_whole(restore_encoder):
    """Its sibling threads may be busy with the caller's own batch: waiting on them could deadlock."""
    set_encoder_workers(2)
    me = threading.current_thread

    def inner() -> list:
        return split_on_encoder_threads(lambda items: (items, me().name), [1, 2, 3, 4])

    [(items, name)] = on_encoder_thread(inner)
    assert items == [1, 2, 3, 4] and name.startswith("parallelsearch-encoder")


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_a_split_batch_comes_back_in_the_callers_order(workers, restore_encoder):
    """Texts of mixed lengths, so sorting by length really reorders them (and undoing it the wrong
    way round gives another order); the
    stand-in encoder returns each text's index, so any mix-up in putting the parts back shows."""
    from parallelsearch.stores.embedders import Embedder

    lengths = [3, 7, 1, 9, 5, 2, 8, 4, 6, 10, 11]  # sorting by length is no involution of the order
    texts = [f"q{i:02d}" + "x" * (3 * n) for i, n in enumerate(lengths)]
    index = {t: i for i, t in enumerate(texts)}
    fake = Embedder.__new__(Embedder)  # no model: _encode_queries is the stand-in below
    fake.query_prefix, fake.calls = "", 0
    fake._encode_queries = lambda part, batch_size: np.array([[index[t]] for t in part], dtype=np.float32)
    set_encoder_workers(workers)
    got = fake.encode_queries(texts)
    assert got[:, 0].tolist() == list(range(len(texts)))
    assert fake.calls == 1


@needs_data
def test_a_split_batch_encodes_as_one_call_would(embedder, restore_encoder):
    texts = [f"which river flows through city number {i}?" + " and why" * (6 - i) for i in range(7)]
    set_encoder_workers(1)
    expected = np.concatenate([embedder.encode_queries([t]) for t in texts])  # no batch, no sort
    set_encoder_workers(2)
    set_encoder_threads(1)
    calls = embedder.calls
    np.testing.assert_allclose(embedder.encode_queries(texts), expected, atol=1e-5)
    assert embedder.calls == calls + 1  # one call, however many threads shared it


class _HeldSearcher:
    """A searcher whose calls wait until ``n`` of them run at once (or time out)."""

    def __init__(self, n: int) -> None:
        self.barrier = threading.Barrier(n, timeout=2)

    def search_batch(self, queries, k=3):
        from parallelsearch.stores.passages import Passage

        self.barrier.wait()
        return [[Passage(id=f"{q}-{i}", title="", text=q, score=1.0 - i) for i in range(k)] for q in queries]


def test_the_request_batcher_runs_as_many_batches_at_once_as_it_is_given():
    async def two_waves(batcher: RequestBatcher):
        first = asyncio.ensure_future(batcher.search(["a", "b"], 2))
        await asyncio.sleep(0.05)  # the first batch is running (held) when the second request comes
        second = asyncio.ensure_future(batcher.search(["c"], 1))
        return await asyncio.gather(first, second, return_exceptions=True)

    a, c = asyncio.run(two_waves(RequestBatcher(_HeldSearcher(2), concurrent_batches=2)))
    assert [[p.id for p in r] for r in a] == [["a-0", "a-1"], ["b-0", "b-1"]]
    assert [[p.id for p in r] for r in c] == [["c-0"]]
    # one batch at a time: the held batch cannot meet a second one, so its barrier breaks
    a, _ = asyncio.run(two_waves(RequestBatcher(_HeldSearcher(2), concurrent_batches=1)))
    assert isinstance(a, Exception) and "BrokenBarrierError" in str(a)


def test_encoder_workers_flow_from_flag_to_the_retrieve_batcher(restore_encoder):
    """--encoder-workers / PARALLELSEARCH_ENCODER_WORKERS -> RetrievalConfig -> the factory
    sizes the encoder pool -> a /retrieve app built afterwards runs that many batches."""
    import argparse

    from parallelsearch.cli_common import add_chroma_args, settings_from_args
    from parallelsearch.graphs.factory import make_embedder
    from parallelsearch.stores import create_retrieval_app
    from parallelsearch.stores.config import RetrievalConfig

    p = argparse.ArgumentParser()
    add_chroma_args(p)
    cfg = settings_from_args(p.parse_args(["--encoder-workers", "2", "--encoder-threads", "1"])).retrieval()
    assert (cfg.encoder_workers, cfg.encoder_threads) == (2, 1)
    make_embedder(cfg)
    assert encoder_thread.encoder_workers() == 2
    app = create_retrieval_app(_HeldSearcher(1))
    assert app.state.batcher._coalescer._max_in_flight == 2
    make_embedder(RetrievalConfig(encoder_backend="torch"))  # unset leaves torch's pool as it is
    assert encoder_thread.encoder_workers() == 2
    with pytest.raises(ValueError, match="encoder_workers"):
        RetrievalConfig(encoder_workers=0)
