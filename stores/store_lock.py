"""One writer at a time per embedded store: an inter-process file lock beside the Chroma folder.

Two processes writing one embedded collection overwrite each other's index files and passages
lose their vectors (docs/architecture.md, "Writing a store"). Writers hold this ``flock`` on
``<chroma folder>.locks/<store>.lock`` from before they open the client until done (the kernel
drops it when the holder dies); readers never take it. The file names the holder.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

from parallelsearch.stores.errors import ParallelSearchError

POLL_S = 0.2  # how often a waiting writer tries again


class StoreLockedError(ParallelSearchError, RuntimeError):
    """Another process is writing the store and this one would not (or could no longer) wait."""


def lock_path(chroma_path: str | Path, store: str) -> Path:
    """``<chroma folder>.locks/<store>.lock``: beside the Chroma folder, not inside Chroma's files."""
    folder = Path(chroma_path)
    return folder.parent / f"{folder.name}.locks" / f"{store}.lock"


def describe_holder(info: dict[str, Any]) -> str:
    if not info:
        return "another process (holder unknown)"
    since = info.get("since")
    when = (
        time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(since)) if isinstance(since, int | float) else "?"
    )
    return f"pid {info.get('pid')} on {info.get('host')} ({info.get('command')!r}, since {when})"


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
        self._file: TextIO | None = None

    def holder(self) -> dict[str, Any]:
        """The holder the lock file names (empty when unreadable)."""
        try:
            return json.loads(self.path.read_text(encoding="utf-8") or "{}")
        except (OSError, ValueError):
            return {}

    def _try(self, f: TextIO) -> bool:
        try:
            fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            return False

    def acquire(self) -> StoreWriteLock:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        f = self.path.open("a+", encoding="utf-8")
        try:
            start = time.monotonic()
            announced = False
            while not self._try(f):
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
            f.seek(0)
            f.truncate()
            holder = {"pid": os.getpid(), "host": socket.gethostname(), "command": " ".join(sys.argv)[:300]}
            f.write(json.dumps({**holder, "since": time.time()}))
            f.flush()
        except BaseException:
            f.close()
            raise
        self._file = f
        return self

    def release(self) -> None:
        if self._file is None:
            return
        try:
            self._file.seek(0)
            self._file.truncate()
            self._file.flush()
            fcntl.flock(self._file.fileno(), fcntl.LOCK_UN)
        finally:
            self._file.close()
            self._file = None

    def __enter__(self) -> StoreWriteLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()
