"""Every embedding forward pass in the process runs on one dedicated thread.

Why: torch's CPU kernels run on an OpenMP thread team that belongs to the calling
thread. When several threads take turns calling the model (asyncio executor threads from
coalesced searches, a server's threads, the main thread of an ingest), each leaves a
team of workers spinning after its turn; on a 2-core machine they take the cores from
the team that is working (in benchmarks/fanout.py, with a /retrieve server's threads in
the same process, one batched 4-query search took 153 ms instead of 30 ms). With one
caller thread there is one team. Handing work to it costs a thread switch (tens of
microseconds) against milliseconds of encoding. Work is done in submission order, one
call at a time, which also serialises the model without a lock.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

T = TypeVar("T")

_lock = threading.Lock()
_executor: ThreadPoolExecutor | None = None
_thread_ident: int | None = None


def _mark_thread() -> None:
    global _thread_ident
    _thread_ident = threading.get_ident()


def _get_executor() -> ThreadPoolExecutor:
    global _executor
    with _lock:
        if _executor is None:
            _executor = ThreadPoolExecutor(
                max_workers=1, thread_name_prefix="parallelsearch-encoder", initializer=_mark_thread
            )
        return _executor


def _forget_in_child() -> None:
    """A forked child has no encoder thread (threads do not survive fork): start a new one on demand."""
    global _executor, _thread_ident, _lock
    _executor, _thread_ident, _lock = None, None, threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_in_child)


def set_encoder_threads(n: int) -> None:
    """Limit the encoder thread's OpenMP team to ``n`` threads (torch's default: every core).

    Why: an OpenMP team spins on its cores between parallel regions. When the encoder shares
    the machine with other CPU-bound work (a CPU vLLM engine, other rollout actors, a busy
    server), a team as wide as the machine takes cores from that work and, oversubscribed,
    mostly waits: a 3-sub-query search step measured 31 ms of CPU with 1 thread and 257 ms
    with 2 on a loaded 2-core machine (docs/vllm.md, "Rollout benchmark").
    """
    if n < 1:
        raise ValueError(f"encoder threads must be >= 1, got {n}")

    def apply() -> None:
        import torch

        torch.set_num_threads(n)

    on_encoder_thread(apply)


def on_encoder_thread(fn: Callable[..., T], *args: object) -> T:
    """Run ``fn(*args)`` on the encoder thread and return its result (exceptions propagate)."""
    if threading.get_ident() == _thread_ident:
        return fn(*args)
    return _get_executor().submit(fn, *args).result()
