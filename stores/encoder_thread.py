"""Every embedding forward pass in the process runs on a dedicated encoder thread.

Why: torch's CPU kernels run on an OpenMP thread team that belongs to the calling thread. When
several threads take turns calling the model (asyncio executor threads from coalesced searches,
a server's threads, the main thread of an ingest), each leaves a team of workers spinning after
its turn, and they take the cores from the team that is working (docs/performance.md, "What made
it faster"). With one caller thread there is one team. Handing work to it costs a thread switch
(tens of microseconds) against milliseconds of encoding. Work is done in submission order, one
call at a time, unless :func:`set_encoder_workers` asks for more encoder threads (each then has
its own team, sized by :func:`set_encoder_threads`; the model's weights are shared and only the
tokenizer needs :data:`tokenizer_lock`). With several encoder threads,
:func:`split_on_encoder_threads` runs the parts of one batch on all of them at once.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")

_lock = threading.Lock()
_executor: ThreadPoolExecutor | None = None
_workers = 1  # encoder threads (set_encoder_workers)
_threads: int | None = None  # OpenMP team size of each encoder thread; None = team_size()'s default
_local = threading.local()  # .encoder: this thread is an encoder thread; .threads: team size applied

# The model's tokenizer is one Rust object with mutable padding/truncation state: two encoder
# threads tokenising at once can fail with "Already borrowed". Tokenising a batch takes well
# under a millisecond against tens for the forward pass, so one lock costs nothing measurable.
tokenizer_lock = threading.Lock()


def _mark_thread() -> None:
    _local.encoder = True


def _executor_locked() -> ThreadPoolExecutor:
    global _executor
    if _executor is None:
        _executor = ThreadPoolExecutor(
            max_workers=_workers, thread_name_prefix="parallelsearch-encoder", initializer=_mark_thread
        )
    return _executor


def _submit(calls: list[tuple[Callable[..., T], tuple]]) -> list[Future[T]]:
    """Submit every call to the current pool in one step: a concurrent resize
    (:func:`set_encoder_workers`) cannot shut the pool down between two of them."""
    with _lock:
        executor = _executor_locked()
        return [executor.submit(_call, fn, args) for fn, args in calls]


def _forget_in_child() -> None:
    """A forked child has no encoder thread (threads do not survive fork): start a new one on demand."""
    global _executor, _lock, _local
    _executor, _lock, _local = None, threading.Lock(), threading.local()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_in_child)


def set_encoder_threads(n: int) -> None:
    """Limit each encoder thread's OpenMP team to ``n`` threads (unset: every core with one
    encoder thread, ``cores / workers`` with several, see :func:`team_size`).

    Why: an OpenMP team spins on its cores between parallel regions. When the encoder shares the
    machine with other CPU-bound work (a CPU vLLM engine, other rollout actors, a busy server),
    a team as wide as the machine takes cores from that work and, oversubscribed, mostly waits,
    spending several times the CPU per search (docs/performance.md, "Figures behind the code's
    choices"). Each encoder thread applies the size before its next call (the team belongs to
    the calling thread).
    """
    global _threads
    if n < 1:
        raise ValueError(f"encoder threads must be >= 1, got {n}")
    _threads = n


def set_encoder_workers(n: int) -> None:
    """Run up to ``n`` encoder calls at once, each on its own encoder thread (default 1), and
    split one batch of queries over them (:func:`split_on_encoder_threads`). Each thread's
    OpenMP team is ``cores / n`` unless :func:`set_encoder_threads` says otherwise.

    Why: one call at a time leaves the cores idle while a server answers the last batch and its
    clients send the next; with ``n`` threads of ``cores / n`` OpenMP threads each, one batch
    encodes while another is being answered, and each batch is split over the threads; a lone
    request, on fewer cores, is a little slower (docs/performance.md, "Figures behind the code's
    choices"). torch's passage encoding (sentence-transformers' ``encode``) holds the tokenizer
    lock throughout, so it stays one call at a time; ONNX's is split too. Calls already queued
    still run.
    """
    global _executor, _workers
    if n < 1:
        raise ValueError(f"encoder workers must be >= 1, got {n}")
    with _lock:
        if n == _workers:
            return
        old, _executor, _workers = _executor, None, n
    if old is not None:
        old.shutdown(wait=False)


def encoder_workers() -> int:
    """How many encoder calls may run at once (the ``/retrieve`` batcher sends that many batches)."""
    return _workers


def usable_cores() -> int:
    """The cores this process may run on: its CPU affinity (a container's ``--cpuset-cpus``,
    Slurm or Ray pinning), not the host's count, which ``os.cpu_count`` gives."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # pragma: no cover - platforms without affinity
        return os.cpu_count() or 1


def team_size() -> int | None:
    """Each encoder thread's OpenMP team: :func:`set_encoder_threads`, else ``cores / workers``
    with several workers (two full-width teams on the same cores would mostly wait on each
    other), else None (torch's default: every core)."""
    if _threads is not None:
        return _threads
    if _workers > 1:
        return max(1, usable_cores() // _workers)
    return None


def _call(fn: Callable[..., T], args: tuple) -> T:
    size = team_size()
    if size is not None and getattr(_local, "threads", None) != size:
        import torch

        torch.set_num_threads(size)
        _local.threads = size
    return fn(*args)


def on_encoder_thread(fn: Callable[..., T], *args: object) -> T:
    """Run ``fn(*args)`` on an encoder thread and return its result (exceptions propagate)."""
    if getattr(_local, "encoder", False):
        return _call(fn, args)
    return _submit([(fn, args)])[0].result()


def split_on_encoder_threads(fn: Callable[[list[T]], R], items: list[T]) -> list[R]:
    """``fn`` on near-equal contiguous parts of ``items``, one part per encoder thread, all at once.

    Why: with ``n`` encoder threads of ``cores / n`` OpenMP threads each, one batch on one thread
    leaves the other threads idle unless another batch is waiting, so a lone request (or the one
    batch of a lightly loaded server) ran on a fraction of the cores. The bare encoder's best
    arrangement on a small machine is exactly this: the batch split over threads of one OpenMP
    thread each (docs/performance.md, "What changed the server (session 7)"). Parts of
    concurrent batches queue in order behind each other. Returns one result per part, in order;
    with one encoder thread, one item, or when called from an encoder thread (its siblings may
    be busy with this batch's caller), ``fn`` runs once on all of ``items``. If a part fails,
    the others are waited for, then the first failure is raised.
    """
    parts = min(_workers, len(items))
    if parts <= 1 or getattr(_local, "encoder", False):
        return [on_encoder_thread(fn, items)]
    size, extra = divmod(len(items), parts)
    bounds = [i * size + min(i, extra) for i in range(parts + 1)]  # the first `extra` parts get one more
    return run_parts_on_encoder_threads(fn, [items[bounds[i] : bounds[i + 1]] for i in range(parts)])


def run_parts_on_encoder_threads(fn: Callable[[list[T]], R], parts: list[list[T]]) -> list[R]:
    """``fn`` on each of ``parts`` (cut by the caller), each on its own encoder thread, all at
    once; one result per part, in order. Called from an encoder thread (its siblings may be
    busy with this batch's caller), the parts run there, one after another. If a part fails,
    the others are waited for, then the first failure is raised."""
    if len(parts) <= 1 or getattr(_local, "encoder", False):
        return [on_encoder_thread(fn, part) for part in parts]
    futures = _submit([(fn, (part,)) for part in parts])
    wait(futures)
    return [f.result() for f in futures]
