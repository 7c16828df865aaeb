"""One writer at a time per embedded store: an inter-process file lock beside the Chroma folder.

Two processes writing one embedded collection overwrite each other's index files and passages
lose their vectors (docs/architecture.md, "Writing a store"). Writers hold this ``flock`` on
``<chroma folder>.locks/<store>.lock`` from before they open the client until done (the kernel
drops it when the holder dies); readers never take it. The file names the holder.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from parallelsearch.stores.errors import ParallelSearchError
from parallelsearch.stores.safe_files import LockFile, describe_holder

__all__ = ["StoreLockedError", "StoreWriteLock", "describe_holder", "lock_path"]

POLL_S = 0.2  # how often a waiting writer tries again


class StoreLockedError(ParallelSearchError, RuntimeError):
    """Another process is writing the store and this one would not (or could no longer) wait."""


def lock_path(chroma_path: str | Path, store: str) -> Path:
    """``<chroma folder>.locks/<store>.lock``: beside the Chroma folder, not inside Chroma's files."""
    folder = Path(chroma_path)
    return folder.parent / f"{folder.name}.locks" / f"{store}.lock"


class StoreWriteLock:
    """Exclusive writer lock of one embedded store; a context manager. ``timeout_s``: how long to wait
    (0 = fail at once, None = no limit); ``on_wait(message naming the holder)`` once when waiting."""

    def __init__(
        self,
        chroma_path: str | Path,
        store: str,
        *,
        timeout_s: float | None = 0.0,
        on_wait: Callable[[str], None] | None = None,
    ) -> None:
        self.path = lock_path(chroma_path, store)
        self.store = store
        self.timeout_s = timeout_s
        self.on_wait = on_wait
        self._lock = LockFile(self.path, f"the lock file of store {store!r}")

    def holder(self) -> dict[str, Any]:
        """The holder the lock file names (empty when unreadable)."""
        return self._lock.holder()

    def acquire(self) -> StoreWriteLock:
        start = time.monotonic()
        announced = False
        while not self._lock.try_acquire():
            who = describe_holder(self.holder())
            waited = time.monotonic() - start
            if self.timeout_s is not None and waited >= self.timeout_s:
                hint = (
                    "wait for it to finish, or pass --lock-timeout SECONDS to wait"
                    if not self.timeout_s
                    else f"gave up after waiting {self.timeout_s:g} s"
                )
                raise StoreLockedError(f"store {self.store!r} is being written by {who}; {hint}")
            if not announced and self.on_wait is not None:
                limit = "" if self.timeout_s is None else f" (up to {self.timeout_s:g} s)"
                self.on_wait(f"store {self.store!r} is being written by {who}; waiting{limit} ...")
                announced = True
            time.sleep(POLL_S)
        return self

    def release(self) -> None:
        self._lock.release()

    def __enter__(self) -> StoreWriteLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()
