"""Why a write to an embedded store failed, in one line: a full disk or a folder this process may
not write. Chroma reports both as its own errors (``InternalError: Error in compaction: Failed
to apply logs to the metadata segment`` for a full disk), so the cause is read off the folder
itself once a write failed (docs/architecture.md, "Writing a store").
"""

from __future__ import annotations

import errno
import os
import shutil
from pathlib import Path

from parallelsearch.stores.errors import ParallelSearchError

#: free bytes under which a failed write is put down to a full disk (Chroma needs pages and logs)
FULL_BELOW_BYTES = 4 * 1024 * 1024
_FULL = (errno.ENOSPC, errno.EDQUOT)
_READ_ONLY = (errno.EROFS, errno.EACCES, errno.EPERM)
_FULL_TEXT = ("no space left", "disk is full", "database or disk is full", "quota exceeded")
_READ_ONLY_TEXT = ("read-only file system", "readonly database", "permission denied")


class StoreWriteError(ParallelSearchError, OSError):
    """A store write failed for a reason outside the store (disk full, folder read-only)."""


def _said(exc: BaseException) -> str:
    seen, e, parts = 0, exc, []
    while e is not None and seen < 8:
        parts.append(str(e).lower())
        e, seen = e.__cause__ or e.__context__, seen + 1
    return " ".join(parts)


def _errnos(exc: BaseException) -> set[int]:
    found, e, seen = set(), exc, 0
    while e is not None and seen < 8:
        if isinstance(e, OSError) and e.errno is not None:
            found.add(e.errno)
        e, seen = e.__cause__ or e.__context__, seen + 1
    return found


def disk_cause(folder: str | Path, exc: BaseException) -> str | None:
    """``"full"``, ``"read-only"`` or None: what kept ``exc``'s write out of ``folder``."""
    folder = Path(folder)
    codes, said = _errnos(exc), _said(exc)
    if codes & set(_FULL) or any(t in said for t in _FULL_TEXT):
        return "full"
    if codes & set(_READ_ONLY) or any(t in said for t in _READ_ONLY_TEXT):
        return "read-only"
    probe = folder if folder.exists() else folder.parent
    if probe.exists() and not os.access(probe, os.W_OK):
        return "read-only"
    try:
        if probe.exists() and shutil.disk_usage(probe).free < FULL_BELOW_BYTES:
            return "full"
    except OSError:
        return None
    return None


def write_failure(store: str, folder: str | Path, exc: BaseException, what: str) -> StoreWriteError | None:
    """The one-line error for ``exc`` (a failed ``what``) when the disk or the folder caused it, else
    None (the caller re-raises ``exc``): nothing of the failed write is kept as half a passage (each
    chunk is one Chroma write), and a rerun skips the passages already in the store."""
    cause = disk_cause(folder, exc)
    if cause is None:
        return None
    if cause == "full":
        free = _free_text(folder)
        why = f"the disk holding {folder} is full ({free} free)"
        fix = "free space"
    else:
        why = f"this process may not write {folder} (read-only)"
        fix = "give this user write access (or index into a folder it may write)"
    return StoreWriteError(
        f"store {store}: {what} failed: {why}; passages added before it are kept; {fix} and run the "
        "same command again: passages already in the store are skipped"
    )


def _free_text(folder: str | Path) -> str:
    probe = Path(folder)
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    try:
        free = shutil.disk_usage(probe).free
    except OSError:
        return "?"
    return f"{free / 1e6:.1f} MB" if free >= 1e5 else f"{free} bytes"
