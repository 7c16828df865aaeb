"""The encoder's own threads: every forward pass of one :class:`~.embedder.Embedder` runs on them.

torch's OpenMP team belongs to the calling thread: several threads taking turns at the model each
leave a team spinning on the cores the working one needs (docs/performance.md, "What made it
faster"). So the passes run on ``workers`` threads of their own, a batch's parts on all at once
(:meth:`EncoderThreads.run_parts`). Also the OpenMP spin count a server sets before torch loads.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import TypeVar

from parallelsearch.stores.errors import at_least

T = TypeVar("T")
R = TypeVar("R")

#: spins before an idle OpenMP worker sleeps, for server processes
SERVER_SPIN_COUNT = 1000


def usable_cores() -> int:
    """The cores this process may run on: its CPU affinity (a container's ``--cpuset-cpus``,
    Slurm or Ray pinning), not the host's count, which ``os.cpu_count`` gives."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # pragma: no cover - platforms without affinity
        return os.cpu_count() or 1


class EncoderThreads:
    """``workers`` encoder threads, each with an OpenMP team of ``team`` threads.

    ``workers`` calls run at once, the rest wait in order. ``team`` unset: every core with one
    worker, ``cores / workers`` with several (full-width teams on the same cores wait on each
    other). The threads start on first use, again in a forked child, and end with the object.
    """

    def __init__(self, workers: int = 1, team: int | None = None) -> None:
        at_least("encoder workers", workers)
        at_least("encoder threads", team, none_ok=True)
        self.workers = workers
        self.team = team if team is not None else (max(1, usable_cores() // workers) if workers > 1 else None)
        self._pid = os.getpid()
        self._lock = threading.Lock()
        self._executor: ThreadPoolExecutor | None = None
        self._local = threading.local()  # .mine: this thread is one of ours; .team: the size applied

    def on_own_thread(self) -> bool:
        return getattr(self._local, "mine", False)

    def _submit(self, calls: list[tuple[Callable[..., T], tuple]]) -> list[Future[T]]:
        if self._pid != os.getpid():  # a forked child: no thread of ours runs here, and the lock may be held
            self._pid, self._lock, self._executor = os.getpid(), threading.Lock(), None
        with self._lock:
            if self._executor is None:
                self._executor = ThreadPoolExecutor(
                    self.workers,
                    thread_name_prefix="parallelsearch-encoder",
                    initializer=_mark,  # not a bound method: the threads must not keep this object alive
                    initargs=(self._local,),
                )
            return [self._executor.submit(self._call, fn, args) for fn, args in calls]

    def _call(self, fn: Callable[..., T], args: tuple) -> T:
        if self.team is not None and getattr(self._local, "team", None) != self.team:
            import torch

            torch.set_num_threads(self.team)
            self._local.team = self.team
        return fn(*args)

    def run(self, fn: Callable[..., T], *args: object) -> T:
        """``fn(*args)`` on an encoder thread (exceptions propagate)."""
        if self.on_own_thread():
            return self._call(fn, args)
        return self._submit([(fn, args)])[0].result()

    def run_parts(self, fn: Callable[[list[T]], R], parts: list[list[T]]) -> list[R]:
        """``fn`` on each of ``parts``, each on its own encoder thread, all at once; results in order,
        the first failure raised once all are done. From an encoder thread the parts run there, one
        after another (waiting on its siblings could deadlock)."""
        if len(parts) <= 1 or self.on_own_thread():
            return [self.run(fn, part) for part in parts]
        futures = self._submit([(fn, (part,)) for part in parts])
        wait(futures)
        return [f.result() for f in futures]


def _mark(local: threading.local) -> None:
    local.mine = True


def let_idle_threads_sleep(spin_count: int = SERVER_SPIN_COUNT) -> str:
    """Set ``GOMP_SPINCOUNT`` for this server process (before ``import torch``: libgomp reads it once);
    returns what was done, for the log. libgomp's default 300,000 spins after every parallel region
    burn a core between batches; 1,000 still bridge the gaps inside a forward pass (docs/performance.md,
    "What changed the server: batches split over threads"). A value the environment set is kept."""
    for name in ("GOMP_SPINCOUNT", "OMP_WAIT_POLICY"):
        if name in os.environ:
            return f"{name}={os.environ[name]} kept (set by the environment)"
    if _openmp_loaded():
        return "GOMP_SPINCOUNT not set: OpenMP was already loaded (set it in the environment instead)"
    os.environ["GOMP_SPINCOUNT"] = str(spin_count)
    return f"GOMP_SPINCOUNT={spin_count} (idle OpenMP threads sleep after {spin_count} spins)"


def _openmp_loaded() -> bool:
    """Whether libgomp is already in this process (torch imported, or another library that links it)."""
    if "torch" in sys.modules:
        return True
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as maps:
            return any("libgomp" in line for line in maps)
    except OSError:  # not Linux: torch is the one that loads it here
        return False
