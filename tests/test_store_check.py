"""A broken store is reported, never a crash: ``stores``, ``stores --check`` and ``index --verify``
read stores in a child process, and a reader that dies by a signal or hangs is a finding about
that store (exit 1, named, with the repair), while the listing goes on with the healthy ones.

Every broken store here is made deterministically from a real one: the half-written state two
unlocked writers leave (the vector index on disk is one writer's, the documents are both's), a
reader killed by a signal while it loads the vector index, and a reader that blocks forever on it.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import needs_data
from test_store_lock import FRESH_CHECK, _existing_store_that_syncs_often, _sentences, _write

from parallelsearch.stores.passages import Passage

pytestmark = [needs_data, pytest.mark.slow]

CLI = [sys.executable, "-m", "parallelsearch.cli"]


def _run(env: dict[str, str], *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([*CLI, *args], env=env, capture_output=True, text=True, timeout=timeout)


def _index(env: dict[str, str], store: str, *files: Path) -> None:
    done = _run(
        env,
        "index",
        "--store",
        store,
        "--no-progress",
        "--batch-size",
        "8",
        "--chunk-size",
        "8",
        *map(str, files),
    )
    assert done.returncode == 0, done.stderr


def _segment(home: Path, store: str) -> Path:
    """The folder of ``store``'s vector index (Chroma names it by the segment's uuid)."""
    import sqlite3

    import chromadb  # noqa: F401 - sqlite3 below reads Chroma's own catalogue

    db = sqlite3.connect(home / "chroma" / "chroma.sqlite3")
    try:
        (seg,) = db.execute(
            "SELECT s.id FROM segments s JOIN collections c ON s.collection = c.id "
            "WHERE c.name = ? AND s.scope = 'VECTOR'",
            (store,),
        ).fetchone()
    finally:
        db.close()
    path = home / "chroma" / seg
    assert (path / "data_level0.bin").is_file(), f"{store} has no vector index on disk yet"
    return path


def _env(home: Path) -> dict[str, str]:
    return dict(os.environ, PARALLELSEARCH_HOME=str(home), HF_HUB_OFFLINE="1")


def test_the_half_written_state_of_two_unlocked_writers_is_reported_and_a_new_store_holds(tmp_path):
    """Two writers without the lock each persist their own in-memory vector index: the last one
    to write wins, and the other's passages keep their documents but lose their vectors. Made
    here exactly: write A, keep A's index files, write B, put A's index files back."""
    home, env = tmp_path / "home", _env(tmp_path / "home")
    rows = _sentences(120)
    files = [_write(tmp_path / "a.jsonl", rows[:60]), _write(tmp_path / "b.jsonl", rows[60:])]
    _existing_store_that_syncs_often(home, "corrupt")
    _index(env, "corrupt", files[0])
    seg = _segment(home, "corrupt")
    shutil.copytree(seg, tmp_path / "after-a")
    _index(env, "corrupt", files[1])
    shutil.rmtree(seg)
    shutil.copytree(tmp_path / "after-a", seg)

    check = _run(env, "stores", "--check", "corrupt")
    assert check.returncode == 1, check.stderr
    assert "store corrupt: CORRUPT: " in check.stdout and "InternalError" in check.stdout, check.stdout
    assert "parallelsearch index --store corrupt-new FILES" in check.stderr, check.stderr
    found = json.loads(_run(env, "stores", "--check", "corrupt", "--json").stdout)
    assert found["count"] == found["checked"] == 120 and not found["ok"], found
    every = {Passage.make(r["title"], r["text"]).id for r in rows}
    lost_writer = {Passage.make(r["title"], r["text"]).id for r in rows[60:]}
    bad = set(found["unreadable"]) | set(found["missing"])
    assert bad <= every and len(bad & lost_writer) > len(lost_writer) // 2, (len(bad), len(bad & lost_writer))
    verify = _run(env, "index", "--store", "corrupt", "--verify", "--no-progress", *map(str, files))
    assert verify.returncode == 1, verify.stderr
    assert "store corrupt is corrupt: nothing was added" in verify.stderr and "CORRUPT" in verify.stdout
    assert "already present" not in verify.stdout
    listing = _run(env, "stores")  # the listing reads counts only: this store still lists
    assert listing.returncode == 0 and listing.stdout.startswith("corrupt\t120\t"), listing
    _index(env, "fresh", *files)
    fresh = subprocess.run([sys.executable, "-c", FRESH_CHECK, "fresh", *map(str, files)], env=env,
                           capture_output=True, text=True, timeout=300)  # fmt: skip
    assert fresh.returncode == 0, fresh.stderr
    assert fresh.stdout.strip().splitlines()[-1] == '{"count": 120, "bad": 0, "lost": 0}'


@pytest.fixture(scope="module")
def two_stores(tmp_path_factory) -> Path:
    """A home with two real stores, ``broken`` (its vector index on disk) and ``healthy``."""
    home = tmp_path_factory.mktemp("stores") / "home"
    env = _env(home)
    rows = _write(home.parent / "rows.jsonl", _sentences(40))
    _existing_store_that_syncs_often(home, "broken")
    _index(env, "broken", rows)
    _index(env, "healthy", rows)
    return home


def _with_blocking_index(two_stores: Path, tmp_path: Path) -> tuple[Path, Path]:
    """A copy of the two stores where ``broken``'s vector index is a FIFO no one writes: Chroma's
    reader blocks opening it, as it would on a file that never delivers its bytes."""
    home = tmp_path / "home"
    shutil.copytree(two_stores, home)
    fifo = _segment(home, "broken") / "data_level0.bin"
    fifo.unlink()
    os.mkfifo(fifo)
    return home, fifo


def _pids_reading(path: Path) -> list[int]:
    """Processes other than this one (which holds the writer end) with ``path`` open."""
    out = []
    for fd_dir in Path("/proc").glob("[0-9]*/fd"):
        if fd_dir.parent.name == str(os.getpid()):
            continue
        try:
            if any(os.readlink(fd) == str(path) for fd in fd_dir.iterdir()):
                out.append(int(fd_dir.parent.name))
        except OSError:  # the process ended, or is not ours to read
            continue
    return out


def _signal_the_reader(fifo: Path, sig: signal.Signals, timeout: float = 120) -> int:
    """Wait until a reader has the FIFO open (a non-blocking writer open succeeds only then), then
    send ``sig`` to it. Returns the writer end, which the caller closes afterwards."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
            break
        except OSError as e:
            assert e.errno == errno.ENXIO and time.monotonic() < deadline, f"no reader opened {fifo}: {e}"
            time.sleep(0.05)
    while not (pids := _pids_reading(fifo)):
        assert time.monotonic() < deadline, f"no process holds {fifo}"
        time.sleep(0.05)
    for pid in pids:
        os.kill(pid, sig)
    return fd


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="finds the reader's pid through /proc (Linux)")
def test_a_reader_killed_by_a_signal_is_corruption_of_that_store_and_the_listing_goes_on(
    two_stores, tmp_path
):
    home, fifo = _with_blocking_index(two_stores, tmp_path)
    env = _env(home)
    for args, sig in ((("stores", "--check", "broken"), signal.SIGSEGV), (("stores",), signal.SIGKILL)):
        proc = subprocess.Popen(
            [*CLI, *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        fd = _signal_the_reader(fifo, sig)
        try:
            out, err = proc.communicate(timeout=300)
        finally:
            os.close(fd)
        assert proc.returncode == 1, (args, out, err)
        assert f"Chroma crashed reading store broken ({sig.name})" in out, (args, out)
        assert "parallelsearch index --store broken-new FILES" in err, err
        assert "Traceback" not in err, err
    lines = out.splitlines()  # the listing: the broken store marked, the healthy one listed
    assert lines[0].startswith("broken\tCORRUPT: Chroma crashed reading store broken (SIGKILL)"), lines
    assert lines[1].startswith("healthy\t40\tall-MiniLM-L6-v2"), lines


def test_a_reader_that_hangs_is_corruption_after_the_read_timeout(two_stores, tmp_path):
    home, _ = _with_blocking_index(two_stores, tmp_path)
    env = _env(home)
    check = _run(env, "stores", "--check", "broken", "--read-timeout", "3")
    assert check.returncode == 1, check.stderr
    assert (
        "store broken: CORRUPT: it cannot be read (Chroma did not answer in 3 s reading store broken)"
        in check.stdout
    )
    verify = _run(env, "index", "--store", "broken", "--verify", "--read-timeout", "3", "--no-progress",
                  str(two_stores.parent / "rows.jsonl"))  # fmt: skip
    assert verify.returncode == 1, verify.stderr
    assert "did not answer in 3 s" in verify.stdout and "nothing was added" in verify.stderr, verify
    listing = _run(env, "stores", "--json", "--read-timeout", "3")
    assert listing.returncode == 1, listing.stderr
    rows = {r["name"]: r for r in json.loads(listing.stdout)}
    assert rows["broken"]["error"] == "Chroma did not answer in 3 s reading store broken"
    assert rows["healthy"]["count"] == 40 and "error" not in rows["healthy"]
    assert _run(env, "stores", "--check", "healthy").returncode == 0
