"""Several encoder threads (``workers``): calls run at once, each thread's OpenMP team is sized
by ``threads``, the shared tokenizer survives concurrent batches, the ``/retrieve`` batcher
sends that many batches at once, and each embedder keeps its own threads (no process-wide
setting: two embedders with different settings in one process do not disturb each other)."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from conftest import needs_data

from parallelsearch.stores.encoding.encoder_threads import EncoderThreads, usable_cores
from parallelsearch.stores.http.request_batching import RequestBatcher


class _Gate:
    """Calls that record how many of them run at once: each waits until ``n`` are inside together,
    or (``n`` = 1) runs straight through. Waits on events, never on a clock."""

    def __init__(self, n: int) -> None:
        self.n, self.inside, self.most = n, 0, 0
        self.names: list[str] = []
        self._cond = threading.Condition()

    def __call__(self) -> str:
        with self._cond:
            self.inside += 1
            self.most = max(self.most, self.inside)
            self.names.append(threading.current_thread().name)
            self._cond.notify_all()
            self._cond.wait_for(lambda: self.most >= self.n)
            self.inside -= 1
        return threading.current_thread().name


def test_two_workers_run_two_calls_at_once_and_one_runs_them_in_turn():
    two, both = EncoderThreads(2), _Gate(2)  # each call waits for the other: only two threads finish
    with ThreadPoolExecutor(2) as callers:
        names = [f.result() for f in [callers.submit(two.run, both) for _ in range(2)]]
    assert (
        both.most == 2 and len(set(names)) == 2 and all(n.startswith("parallelsearch-encoder") for n in names)
    )

    one, alone = EncoderThreads(1), _Gate(1)
    with ThreadPoolExecutor(2) as callers:
        names = [f.result() for f in [callers.submit(one.run, alone) for _ in range(4)]]
    assert alone.most == 1 and len(set(names)) == 1 and names[0].startswith("parallelsearch-encoder")


def test_every_worker_gets_the_configured_team_size():
    import torch

    pool, both = EncoderThreads(2, team=1), _Gate(2)

    def team() -> int:
        both()  # both workers answer, not one twice
        return torch.get_num_threads()

    with ThreadPoolExecutor(2) as callers:
        sizes = [f.result() for f in [callers.submit(pool.run, team) for _ in range(2)]]
    assert sizes == [1, 1]


def test_several_workers_without_a_team_size_share_the_cores():
    """Two full-width teams on the same cores would mostly wait on each other: with N workers
    and no --encoder-threads, each team is cores / N (at least 1); one worker keeps torch's."""
    import torch

    pool = EncoderThreads(2)
    share = max(1, usable_cores() // 2)
    assert pool.team == share
    assert pool.run(torch.get_num_threads) == share
    assert EncoderThreads(1).team is None


def test_bad_worker_and_thread_counts_are_refused():
    with pytest.raises(ValueError, match="encoder workers must be >= 1"):
        EncoderThreads(0)
    with pytest.raises(ValueError, match="encoder threads must be >= 1"):
        EncoderThreads(2, team=0)


@needs_data
def test_concurrent_batches_on_two_workers_match_serial_encoding(embedder):
    """The tokenizer is shared by the workers (and by every embedder of the model): concurrent
    batches must neither fail nor mix."""
    from parallelsearch.stores import get_embedder

    texts = [f"who directed film number {i} of the festival in {1900 + i}?" for i in range(48)]
    batches = [texts[i : i + 1 + i % 5] for i in range(0, 48, 3)]
    expected = [embedder.encode_queries(b) for b in batches]
    two = get_embedder(workers=2, threads=1)
    assert two._model is embedder._model  # one copy of the weights
    with ThreadPoolExecutor(8) as callers:
        got = list(callers.map(two.encode_queries, batches * 3))
    for e, g in zip(expected * 3, got, strict=True):
        np.testing.assert_allclose(g, e, atol=1e-5)


def _stand_in_embedder(workers: int, encode) -> object:
    """An :class:`Embedder` without a model: ``encode(part)`` stands in for its query encoder."""
    from parallelsearch.stores import Embedder

    fake = Embedder.__new__(Embedder)
    fake.query_prefix, fake.calls, fake._threads = "", 0, EncoderThreads(workers)
    fake._encode_queries = lambda part, batch_size: encode(part)
    return fake


def test_one_batch_is_split_over_the_encoder_threads_and_runs_on_all_at_once():
    """A batch of 5 on 2 encoder threads: parts of 3 and 2 (in order of length), each on its own
    thread, at once (each part waits until both run); one item or one thread: one call."""
    both = _Gate(2)
    seen: list[tuple[list[str], str]] = []

    def part(texts: list[str]) -> np.ndarray:
        both()
        seen.append((texts, threading.current_thread().name))
        return np.zeros((len(texts), 1), dtype=np.float32)

    _stand_in_embedder(2, part).encode_queries(["ccc", "a", "eeeee", "bb", "dddd"])
    assert sorted(texts for texts, _ in seen) == [["a", "bb", "ccc"], ["dddd", "eeeee"]]
    assert len({name for _, name in seen}) == 2
    lone = _stand_in_embedder(2, lambda texts: np.array([[len(texts)]], dtype=np.float32))
    assert lone.encode_queries(["x"]).tolist() == [[1.0]]
    calls: list[list[str]] = []
    one_thread = _stand_in_embedder(1, lambda texts: calls.append(texts) or np.zeros((len(texts), 1)))
    one_thread.encode_queries(["bb", "a", "ccc"])
    assert calls == [["a", "bb", "ccc"]]  # one thread: one call


def test_parts_run_from_an_encoder_thread_run_there_one_after_another():
    """Its sibling threads may be busy with the caller's own batch: waiting on them could deadlock."""
    pool = EncoderThreads(2)
    me = threading.current_thread

    def inner() -> list:
        return pool.run_parts(lambda items: (items, me().name), [[1, 2], [3, 4]])

    [(a, first), (b, second)] = pool.run(inner)
    assert (a, b) == ([1, 2], [3, 4]) and first == second and first.startswith("parallelsearch-encoder")


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_a_split_batch_comes_back_in_the_callers_order(workers):
    """Texts of mixed lengths, so sorting by length really reorders them (and undoing it the wrong
    way round gives another order); the
    stand-in encoder returns each text's index, so any mix-up in putting the parts back shows."""
    lengths = [3, 7, 1, 9, 5, 2, 8, 4, 6, 10, 11]  # sorting by length is no involution of the order
    texts = [f"q{i:02d}" + "x" * (3 * n) for i, n in enumerate(lengths)]
    index = {t: i for i, t in enumerate(texts)}
    fake = _stand_in_embedder(workers, lambda part: np.array([[index[t]] for t in part], dtype=np.float32))
    got = fake.encode_queries(texts)
    assert got[:, 0].tolist() == list(range(len(texts)))
    assert fake.calls == 1


@needs_data
def test_a_split_batch_encodes_as_one_call_would(embedder):
    from parallelsearch.stores import get_embedder

    texts = [f"which river flows through city number {i}?" + " and why" * (6 - i) for i in range(7)]
    expected = np.concatenate([embedder.encode_queries([t]) for t in texts])  # no batch, no sort
    two = get_embedder(workers=2, threads=1)
    calls = two.calls
    np.testing.assert_allclose(two.encode_queries(texts), expected, atol=1e-5)
    assert two.calls == calls + 1  # one call, however many threads shared it


class _HeldSearcher:
    """A searcher whose calls are held until the test releases them; it counts the calls inside."""

    def __init__(self) -> None:
        self.inside = 0
        self.release = threading.Event()
        self._cond = threading.Condition()

    def search_batch(self, queries, k=3):
        from parallelsearch.stores.passages import Passage

        with self._cond:
            self.inside += 1
            self._cond.notify_all()
        self.release.wait()
        return [[Passage(id=f"{q}-{i}", title="", text=q, score=1.0 - i) for i in range(k)] for q in queries]

    def wait_inside(self, n: int) -> None:
        with self._cond:
            self._cond.wait_for(lambda: self.inside >= n)


async def _settle() -> None:
    """Let every task the loop has ready take its next step (the batcher dispatches synchronously)."""
    for _ in range(3):
        await asyncio.sleep(0)


def test_the_request_batcher_runs_as_many_batches_at_once_as_it_is_given():
    async def two_batches_held_together(held: _HeldSearcher):
        batcher = RequestBatcher(held, concurrent_batches=2)
        first = asyncio.ensure_future(batcher.search(["a", "b"], 2))
        await asyncio.to_thread(held.wait_inside, 1)
        second = asyncio.ensure_future(batcher.search(["c"], 1))
        await asyncio.to_thread(held.wait_inside, 2)  # the second batch runs while the first is held
        held.release.set()
        return await asyncio.gather(first, second)

    a, c = asyncio.run(two_batches_held_together(_HeldSearcher()))
    assert [[p.id for p in r] for r in a] == [["a-0", "a-1"], ["b-0", "b-1"]]
    assert [[p.id for p in r] for r in c] == [["c-0"]]

    async def one_at_a_time(held: _HeldSearcher):
        # batches of one, so a second batch would start at once if a second one were allowed
        batcher = RequestBatcher(held, max_batch=1, concurrent_batches=1)
        first = asyncio.ensure_future(batcher.search(["a"], 1))
        await asyncio.to_thread(held.wait_inside, 1)
        second = asyncio.ensure_future(batcher.search(["c"], 1))
        await _settle()
        started_while_held = batcher._coalescer.batches
        held.release.set()
        return started_while_held, await asyncio.gather(first, second)

    started, (a, c) = asyncio.run(one_at_a_time(_HeldSearcher()))
    assert started == 1 and [[p.id for p in r] for r in a + c] == [["a-0"], ["c-0"]]


def test_encoder_workers_flow_from_flag_to_the_retrieve_batcher():
    """--encoder-workers / PARALLELSEARCH_ENCODER_WORKERS -> RetrievalConfig -> make_embedder
    sizes that embedder's encoder threads -> a /retrieve app over its store runs that many batches;
    an embedder of other settings keeps its own."""
    import argparse
    from types import SimpleNamespace

    from parallelsearch.cli.common import add_chroma_args, settings_from_args
    from parallelsearch.stores import create_retrieval_app
    from parallelsearch.stores.config import RetrievalConfig
    from parallelsearch.stores.encoding.embedder import make_embedder

    p = argparse.ArgumentParser()
    add_chroma_args(p)
    cfg = settings_from_args(p.parse_args(["--encoder-workers", "2", "--encoder-threads", "1"])).retrieval()
    assert (cfg.encoder_workers, cfg.encoder_threads) == (2, 1)
    two = make_embedder(cfg.model_copy(update={"encoder_backend": "torch"}))
    assert (two.workers, two.team) == (2, 1)
    app = create_retrieval_app(SimpleNamespace(embedder=two, name="s", count=lambda: 0))
    assert app.state.batcher._coalescer._max_in_flight == 2
    one = make_embedder(RetrievalConfig(encoder_backend="torch"))  # unset: torch's one thread
    assert (one.workers, one.team, two.workers) == (1, None, 2)
    with pytest.raises(ValueError, match="encoder_workers"):
        RetrievalConfig(encoder_workers=0)


def test_two_embedders_with_other_settings_in_one_process_keep_their_own(embedder):
    """Workers and OpenMP team belong to the embedder: building one with 2 threads x 1 does not
    resize the default one's, and both encode at the same time to the same vectors."""
    import torch

    from parallelsearch.stores import Embedder

    wide = embedder.run(torch.get_num_threads)  # torch's default team: every core
    narrow = Embedder(workers=2, threads=1)
    texts = [f"which river flows through city number {i}?" for i in range(6)]
    expected = embedder.encode_queries(texts)
    with ThreadPoolExecutor(4) as callers:
        futures = [callers.submit(e.encode_queries, texts) for e in (embedder, narrow) * 3]
        for f in futures:
            np.testing.assert_allclose(f.result(timeout=120), expected, atol=1e-5)
    assert (narrow.workers, narrow.run(torch.get_num_threads)) == (2, 1)
    assert (embedder.workers, embedder.run(torch.get_num_threads)) == (1, wide)
    assert embedder.run(threading.get_ident) not in {narrow.run(threading.get_ident) for _ in range(4)}
