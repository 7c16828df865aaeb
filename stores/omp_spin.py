"""Servers let their idle OpenMP threads sleep sooner: ``GOMP_SPINCOUNT`` set before torch loads.

Why: torch's CPU kernels run on a GNU OpenMP team, whose worker threads busy-wait after every
parallel region for libgomp's default 300,000 spins (milliseconds) before they sleep. Inside one
forward pass that keeps the next region fast. Between batches it burns a core that a server
needs for everything else: answering the last batch, parsing the next requests, the Chroma
query. With ``GOMP_SPINCOUNT=1000`` a server spends less CPU per query and answers more queries
per second, and the bare encoder is as fast as before, because 1,000 spins still bridge the gaps
between the regions of one forward pass
(docs/performance.md, "What changed the server (session 7)").

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
