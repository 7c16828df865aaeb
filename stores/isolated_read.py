"""Read stores in a child process with a deadline, so a broken store is a finding, not a crash.

A damaged HNSW segment can kill Chroma's native reader (SIGSEGV) or block it forever, and the
asking process with it. ``stores --check``, ``index --verify`` and the store listing read in a
child (``python -m parallelsearch.stores.isolated_read``) that reports one JSON line per step; a
signal, a non-zero exit or silence past the deadline becomes a finding naming the store.
"""

from __future__ import annotations

import argparse
import json
import os
import selectors
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from parallelsearch.stores.errors import StoreNotFoundError, UnavailableError

if TYPE_CHECKING:
    from parallelsearch.stores.store_check import StoreCheck

DEFAULT_READ_TIMEOUT_S = 120.0  # silence allowed between two steps: loading a 1M-vector segment takes a while
#: the child's start (Python and Chroma's imports, no store read yet): seconds on a loaded machine,
#: so it is not held to a short read timeout; it ends with the child's ``ready`` line
START_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class StoreLocation:
    """Where the stores live: an embedded folder or a Chroma server (what the child opens)."""

    path: Path | None = None
    host: str | None = None
    port: int = 8000

    def argv(self) -> list[str]:
        if self.host:
            return ["--host", self.host, "--port", str(self.port)]
        if self.path is None:
            raise ValueError(
                "no store location: set chroma_path (embedded store) or chroma_host (Chroma server)"
            )
        return ["--path", str(self.path)]


class ReaderFailed(Exception):
    """The child reading a store died or went silent; ``store`` is the one it was reading."""

    def __init__(self, store: str | None, what: str):
        self.store, self.what = store, what
        super().__init__(what)


def _signal_name(returncode: int) -> str:
    try:
        return signal.Signals(-returncode).name
    except ValueError:
        return f"signal {-returncode}"


def _events(argv: list[str], timeout_s: float, store: str | None = None) -> Iterator[dict[str, Any]]:
    """The child's JSON lines as they come; :class:`ReaderFailed` on a crash or ``timeout_s`` of
    silence (the deadline restarts with every line, so a long check reporting progress goes on).
    The child's start, up to its ``ready`` line, reads no store and gets :data:`START_TIMEOUT_S`.
    ``store``: the store the child reads first (its findings name it before the child does)."""
    cmd = [sys.executable, "-m", "parallelsearch.stores.isolated_read", *argv]
    reading = {"store": store}  # the store the child said it reads last
    with tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, stdin=subprocess.DEVNULL)
        assert proc.stdout is not None
        try:
            for event in _lines(proc, timeout_s, reading):
                if not event.get("ready"):
                    yield event
            _exit_status(proc, err, timeout_s, reading["store"])
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            proc.stdout.close()


def _lines(
    proc: subprocess.Popen, timeout_s: float, reading: dict[str, str | None]
) -> Iterator[dict[str, Any]]:
    """``proc``'s stdout as JSON lines until it closes, each within its deadline; ``reading["store"]``
    follows the ``store`` the lines name."""
    assert proc.stdout is not None
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    buf = b""
    try:
        wait = max(timeout_s, START_TIMEOUT_S)
        deadline = time.monotonic() + wait
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not sel.select(timeout=left):  # the caller kills the child
                store = reading["store"]
                raise ReaderFailed(store, f"Chroma did not answer in {wait:g} s reading store {store}")
            chunk = os.read(proc.stdout.fileno(), 1 << 16)
            if not chunk:
                return
            buf += chunk
            *lines, buf = buf.split(b"\n")
            for line in lines:
                event = json.loads(line)
                reading["store"] = event.get("store", reading["store"])
                yield event
            wait = timeout_s
            deadline = time.monotonic() + wait
    finally:
        sel.close()


def _exit_status(proc: subprocess.Popen, err: Any, timeout_s: float, current: str | None) -> None:
    """A finding when the child, done talking, does not exit, exits by a signal or fails (its exit,
    like its start, reads no store: it is not held to a short read timeout)."""
    wait = max(timeout_s, START_TIMEOUT_S)
    try:
        rc = proc.wait(timeout=wait)
    except subprocess.TimeoutExpired:
        raise ReaderFailed(
            current, f"Chroma did not exit in {wait:g} s after reading store {current}"
        ) from None
    if rc < 0:
        raise ReaderFailed(current, f"Chroma crashed reading store {current} ({_signal_name(rc)})")
    if rc != 0:
        err.seek(0)
        tail = err.read().decode("utf-8", "replace").strip().splitlines()
        raise ReaderFailed(
            current,
            f"the reader of store {current} failed (exit {rc}): {tail[-1] if tail else 'no output'}",
        )


def check_store(
    location: StoreLocation,
    name: str,
    *,
    timeout_s: float = DEFAULT_READ_TIMEOUT_S,
    batch_size: int = 512,
    progress: bool = False,
) -> StoreCheck:
    """:meth:`ChromaStore.verify` in a child; a crash or hang is a finding (``count=-1``). An
    embedded store's files are looked at too (``store_files.py``): a store they show broken is not
    ok even when every vector Chroma lists reads back, and a read-only one is checked by its
    files alone (Chroma cannot open it)."""
    from parallelsearch.stores.store_check import StoreCheck
    from parallelsearch.stores.store_files import inspect_store, read_only_reason

    files = None
    if location.path is not None and not location.host:
        files = inspect_store(location.path, name, every_page=True)
        reason = read_only_reason(Path(location.path))
        if reason:
            first = None if files.ok else files.describe()
            return StoreCheck(store=name, count=files.passages, read_only=reason, first_error=first)
        if files.index_broken:  # Chroma would crash on these files, or write new ones over them
            return StoreCheck(
                store=name, count=-1, checked=-1, first_error=files.describe(), new_folder=files.sqlite_broken
            )
    check = _check_in_child(location, name, timeout_s=timeout_s, batch_size=batch_size, progress=progress)
    if files is not None and not files.ok and check.ok:
        check.first_error = files.describe()
    return check


def _check_in_child(
    location: StoreLocation, name: str, *, timeout_s: float, batch_size: int, progress: bool
) -> StoreCheck:
    from tqdm.auto import tqdm

    from parallelsearch.stores.store_check import StoreCheck

    argv = [*location.argv(), "check", name, "--batch-size", str(batch_size)]
    with tqdm(desc=f"checking {name}", disable=not progress) as bar:
        try:
            for event in _events(argv, timeout_s, store=name):
                if "missing_store" in event:
                    raise StoreNotFoundError(event["missing_store"])
                if "checked" in event:
                    bar.total = event["count"]
                    bar.update(event["checked"] - bar.n)
                if "result" in event:
                    return StoreCheck(**event["result"])
        except ReaderFailed as e:
            return StoreCheck(store=name, count=-1, checked=-1, first_error=e.what)
    return StoreCheck(
        store=name, count=-1, checked=-1, first_error=f"the reader of store {name} reported no result"
    )


def list_stores(
    location: StoreLocation,
    *,
    timeout_s: float = DEFAULT_READ_TIMEOUT_S,
    known: dict[str, dict[str, Any]] | None = None,
) -> list[dict[str, Any]]:
    """Every store's name, count and model, read in a child; a store that breaks the reader is
    listed with an ``error`` and the listing goes on with the rest in a fresh child. ``known``:
    rows already found (stores the child must not open), listed as they are."""
    rows: dict[str, dict[str, Any]] = dict(known or {})
    while True:
        skip = [a for name in rows for a in ("--skip", name)]
        try:
            for event in _events([*location.argv(), "list", *skip], timeout_s):
                if "row" in event:
                    rows[event["row"]["name"]] = event["row"]
            break
        except ReaderFailed as e:
            if e.store is None or e.store in rows:
                raise UnavailableError(
                    f"cannot list the stores at {location.path or location.host}: {e.what}"
                ) from e
            rows[e.store] = {"name": e.store, "count": None, "error": e.what}
    return sorted(rows.values(), key=lambda r: r["name"])


def _emit(event: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(event) + "\n")
    sys.stdout.flush()


def _child(argv: list[str]) -> int:
    import chromadb  # noqa: F401 - imported before ``ready``: the start is not the store's read time

    from parallelsearch.stores import chroma_store

    _emit({"ready": True})  # imports done: from here on the child reads the store
    ap = argparse.ArgumentParser(prog="python -m parallelsearch.stores.isolated_read")
    ap.add_argument("--path")
    ap.add_argument("--host")
    ap.add_argument("--port", type=int, default=8000)
    sub = ap.add_subparsers(dest="op", required=True)
    lp = sub.add_parser("list")
    lp.add_argument("--skip", action="append", default=[])
    cp = sub.add_parser("check")
    cp.add_argument("store")
    cp.add_argument("--batch-size", type=int, default=512)
    args = ap.parse_args(argv)
    client = chroma_store.make_client(path=args.path, host=args.host, port=args.port, create=False)
    names = sorted(chroma_store.collection_names(client))
    if args.op == "list":
        for name in names:
            if name in args.skip:
                continue
            _emit({"store": name})
            _emit({"store": name, "row": chroma_store.describe_collection(client, name)})
        return 0
    if args.store not in names:
        _emit({"missing_store": f"no store named {args.store!r} at {args.host or args.path}"})
        return 0
    _emit({"store": args.store})
    col = client.get_collection(args.store, embedding_function=None)
    dimension = (col.metadata or {}).get(chroma_store.META_DIM)
    check = chroma_store.verify_collection(
        col,
        args.store,
        dimension,
        args.batch_size,
        on_progress=lambda checked, count: _emit({"store": args.store, "checked": checked, "count": count}),
    )
    _emit({"store": args.store, "result": check.__dict__})
    return 0


if __name__ == "__main__":
    sys.exit(_child(sys.argv[1:]))
