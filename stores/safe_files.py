"""A lock file that names its holder and is safe to keep in a folder others may write.

Both of the project's inter-process locks (a store's writer lock, a threads file's server lock)
are an ``flock`` on a small file: the kernel drops it when the holder dies, and the file's text
names the holder for the next process's message. A folder such as ``<chroma>.locks/`` may be
shared, so the file is opened without following a link (``O_NOFOLLOW``), must be a regular file
with one name (a hard link would point the writes at another file), and is never truncated: the
holder is written over a fixed-size record with ``pwrite`` (docs/architecture.md, "Writing a store").
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import socket
import stat
import sys
import time
from pathlib import Path
from typing import Any

from parallelsearch.stores.errors import ParallelSearchError

#: bytes of the holder record at the start of the file (padded with spaces; never truncated)
RECORD_BYTES = 1024


class UnsafeFileError(ParallelSearchError, PermissionError):
    """A file this project would write is a link or not a plain file: writing would follow it."""


def refuse_link(path: Path, what: str) -> UnsafeFileError:
    return UnsafeFileError(
        f"{what} {path} is a symbolic link or hard link, not a plain file of its own; refusing to "
        "write through it (remove it; whoever can write that folder could point it at any file)"
    )


def open_no_follow(path: str | Path, what: str, flags: int = os.O_RDWR | os.O_CREAT) -> int:
    """A descriptor of ``path`` opened without following a link (``O_NOFOLLOW``); a link, a hard
    link or anything but a regular file is an :class:`UnsafeFileError` naming ``what``."""
    path = Path(path)
    try:
        fd = os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise refuse_link(path, what) from None
        raise
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode) or info.st_nlink > 1:
        os.close(fd)
        raise refuse_link(path, what)
    return fd


def read_holder(path: str | Path) -> dict[str, Any]:
    """The holder a lock file names (empty when none, unreadable or a link)."""
    try:
        fd = open_no_follow(path, "lock file", os.O_RDONLY)
    except OSError:
        return {}
    try:
        text = os.pread(fd, RECORD_BYTES, 0).decode("utf-8", errors="replace").strip()
        value = json.loads(text) if text else {}
        return value if isinstance(value, dict) else {}
    except ValueError:
        return {}
    finally:
        os.close(fd)


def describe_holder(info: dict[str, Any]) -> str:
    if not info:
        return "another process (holder unknown)"
    since = info.get("since")
    when = (
        time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(since)) if isinstance(since, int | float) else "?"
    )
    return f"pid {info.get('pid')} on {info.get('host')} ({info.get('command')!r}, since {when})"


class LockFile:
    """An exclusive ``flock`` on one file (see the module doc); ``try_acquire`` never blocks."""

    def __init__(self, path: str | Path, what: str = "lock file"):
        self.path, self.what = Path(path), what
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def try_acquire(self) -> bool:
        """Take the lock and write this process as its holder; False when another holds it."""
        if self._fd is not None:
            return True
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = open_no_follow(self.path, self.what)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        self._fd = fd
        holder = {"pid": os.getpid(), "host": socket.gethostname(), "command": " ".join(sys.argv)[:300]}
        self._write(json.dumps({**holder, "since": time.time()}))
        return True

    def _write(self, text: str) -> None:
        record = text.encode("utf-8")[: RECORD_BYTES - 1]
        assert self._fd is not None
        os.pwrite(self._fd, record.ljust(RECORD_BYTES - 1) + b"\n", 0)

    def holder(self) -> dict[str, Any]:
        return read_holder(self.path)

    def release(self) -> None:
        if self._fd is None:
            return
        try:
            self._write("")
            fcntl.flock(self._fd, fcntl.LOCK_UN)
        finally:
            os.close(self._fd)
            self._fd = None


def refuse_links_under(folder: str | Path, what: str) -> None:
    """:class:`UnsafeFileError` when a file Chroma would write in ``folder`` (``chroma.sqlite3`` and
    its journals, each index folder's files) is a link or has another name: Chroma opens its
    files by path and would write through one. The folder itself may be a link (an operator's)."""
    folder = Path(folder)
    if not folder.is_dir():
        return
    for entry in os.scandir(folder):
        _refuse_link(entry, what)
        if entry.is_dir(follow_symlinks=False):
            for inner in os.scandir(entry.path):
                _refuse_link(inner, what)


def _refuse_link(entry: os.DirEntry, what: str) -> None:
    if entry.is_symlink():
        raise refuse_link(Path(entry.path), what)
    if entry.is_file(follow_symlinks=False) and entry.stat(follow_symlinks=False).st_nlink > 1:
        raise refuse_link(Path(entry.path), what)
