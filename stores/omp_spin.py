"""Servers let their idle OpenMP threads sleep sooner: ``GOMP_SPINCOUNT`` set before torch loads.

Why: torch's CPU kernels run on a GNU OpenMP team, whose worker threads busy-wait after
every parallel region for libgomp's default 300,000 spins (several milliseconds on the
benchmark machine) before they sleep. Inside one forward pass that keeps the next region
fast. Between batches it burns a core that a server needs for everything else: answering
the last batch, parsing the next requests, the Chroma query. Measured on 2 cores
(``serve-retriever``, default arrangement, MiniLM): a lone request cost 25 ms of CPU for a
~8 ms encode; with ``GOMP_SPINCOUNT=1000`` it cost 17 ms, its p50 fell from 13.1 to 11.2
ms, and 8 / 32 clients went from 155 / 165 to 174 / 179 queries/s. The bare encoder's own
speed did not change (batch 1 7.7-8.1 ms, batch 8 214-224 queries/s either way), because
1,000 spins still bridge the gaps between the regions of one forward pass.

libgomp reads the variable once, when it is loaded, so this must run before ``import
torch``; a value the user set (or ``OMP_WAIT_POLICY``) is kept. Child processes inherit it
(measured only for the encoder; set ``GOMP_SPINCOUNT`` yourself to give them another value).
"""

from __future__ import annotations

import os
import sys

#: spins before an idle OpenMP worker sleeps, for server processes
SERVER_SPIN_COUNT = 1000


def let_idle_threads_sleep(spin_count: int = SERVER_SPIN_COUNT) -> str:
    """Set ``GOMP_SPINCOUNT`` for this process; returns what was done, in words (for the log)."""
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
