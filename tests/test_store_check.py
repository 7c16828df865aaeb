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
from conftest import free_port, needs_data
from store_probes import cli
from test_store_lock import FRESH_CHECK, _existing_store_that_syncs_often, _sentences, _write

from parallelsearch.stores.passages import Passage

pytestmark = [needs_data, pytest.mark.slow]

CLI = [sys.executable, "-m", "parallelsearch.cli"]


def _run(env: dict[str, str], *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    """The command in a child process: for a damaged store opened by the command's own process
    (should its refusal fail, Chroma may crash or hang there, and not in the test's process)."""
    return subprocess.run([*CLI, *args], env=env, capture_output=True, text=True, timeout=timeout)


def _cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    """The command in this process (``store_probes.cli``): healthy stores, and the readers that read
    a store in a child process of their own."""
    return cli(Path(env["PARALLELSEARCH_HOME"]), *args)


def _index(env: dict[str, str], store: str, *files: Path) -> None:
    done = _cli(
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

    check = _cli(env, "stores", "--check", "corrupt")
    assert check.returncode == 1, check.stderr
    assert "store corrupt: CORRUPT: " in check.stdout and "InternalError" in check.stdout, check.stdout
    assert "parallelsearch index --store corrupt-new FILES" in check.stderr, check.stderr
    found = json.loads(_cli(env, "stores", "--check", "corrupt", "--json").stdout)
    assert found["count"] == found["checked"] == 120 and not found["ok"], found
    every = {Passage.make(r["title"], r["text"]).id for r in rows}
    lost_writer = {Passage.make(r["title"], r["text"]).id for r in rows[60:]}
    bad = set(found["unreadable"]) | set(found["missing"])
    assert bad <= every and len(bad & lost_writer) > len(lost_writer) // 2, (len(bad), len(bad & lost_writer))
    verify = _cli(env, "index", "--store", "corrupt", "--verify", "--no-progress", *map(str, files))
    assert verify.returncode == 1, verify.stderr
    assert "store corrupt is corrupt: nothing was added" in verify.stderr and "CORRUPT" in verify.stdout
    assert "already present" not in verify.stdout
    listing = _cli(env, "stores")  # the listing compares the index with SQLite: it does not add up
    assert listing.returncode == 1 and listing.stdout.startswith("corrupt\tCORRUPT: "), listing
    assert "passages cannot be found by search" in listing.stdout, listing.stdout
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


def _with_blocking_index(
    two_stores: Path, tmp_path: Path, name: str = "index_metadata.pickle"
) -> tuple[Path, Path]:
    """A copy of the two stores where a file of ``broken``'s vector index is a FIFO no one writes:
    Chroma's reader blocks opening it, as it would on a file that never delivers its bytes. The id
    map (the pickle) is the file only Chroma reads; the others are looked at before Chroma opens
    the store (``store_files.py``), which refuses a data file that is no file without reading it."""
    home = tmp_path / "home"
    shutil.copytree(two_stores, home)
    fifo = _segment(home, "broken") / name
    fifo.unlink()
    os.mkfifo(fifo)
    return home, fifo


def test_an_index_data_file_that_is_no_file_is_refused_before_any_reader(two_stores, tmp_path):
    home, _ = _with_blocking_index(two_stores, tmp_path, "data_level0.bin")
    env = _env(home)
    check = _cli(env, "stores", "--check", "broken", "--read-timeout", "30")
    assert check.returncode == 1 and "lacks data_level0.bin" in check.stdout, check
    search = _run(env, "search", "Ed Wood", "--store", "broken", timeout=120)
    assert search.returncode == 2 and "does not add up" in search.stderr and "Traceback" not in search.stderr


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
    check = _cli(env, "stores", "--check", "broken", "--read-timeout", "3")
    assert check.returncode == 1, check.stderr
    assert (
        "store broken: CORRUPT: it cannot be read (Chroma did not answer in 3 s reading store broken)"
        in check.stdout
    )
    verify = _cli(env, "index", "--store", "broken", "--verify", "--read-timeout", "3", "--no-progress",
                  str(two_stores.parent / "rows.jsonl"))  # fmt: skip
    assert verify.returncode == 1, verify.stderr
    assert "did not answer in 3 s" in verify.stdout and "nothing was added" in verify.stderr, verify
    # the listing reads the healthy store too: a deadline it meets on a loaded machine as well
    listing = _cli(env, "stores", "--json", "--read-timeout", "20")
    assert listing.returncode == 1, listing.stderr
    rows = {r["name"]: r for r in json.loads(listing.stdout)}
    assert rows["broken"]["error"] == "Chroma did not answer in 20 s reading store broken"
    assert rows["healthy"]["count"] == 40 and "error" not in rows["healthy"]
    assert _cli(env, "stores", "--check", "healthy").returncode == 0


def test_a_reader_silent_from_its_start_is_named_by_the_store_it_was_asked_for(two_stores, tmp_path):
    """A deadline shorter than the child's start: its start (imports) has its own deadline, so the
    short one runs out reading the hanging store, and the finding names it before the child did."""
    from parallelsearch.stores.isolated_read import StoreLocation, check_store

    home, _ = _with_blocking_index(two_stores, tmp_path)
    check = check_store(StoreLocation(path=home / "chroma"), "broken", timeout_s=0.01)
    assert check.first_error == "Chroma did not answer in 0.01 s reading store broken", check


# ---- a store opened for reading is looked at first ----------------------------------------------
@pytest.fixture(scope="module")
def flushed(tmp_path_factory) -> Path:
    """A home with store ``flushed``: 40 real passages, its vector index written to disk (every 16)."""
    home = tmp_path_factory.mktemp("flushed") / "home"
    _existing_store_that_syncs_often(home, "flushed")
    _index(_env(home), "flushed", _write(home.parent / "rows.jsonl", _sentences(40)))
    return home


def _copy(flushed: Path, tmp_path: Path) -> tuple[Path, dict[str, str], Path]:
    home = tmp_path / "home"
    shutil.copytree(flushed, home)
    return home, _env(home), _segment(home, "flushed")


def _refused(done: subprocess.CompletedProcess, *words: str) -> None:
    """Exit 2 with one ``error:`` line naming the store, the finding and the repair; no traceback."""
    assert done.returncode == 2, (done.returncode, done.stdout[-500:], done.stderr[-2000:])
    assert "Traceback" not in done.stderr and done.stderr.startswith("error: store flushed at "), done.stderr
    assert "parallelsearch index --store flushed-new FILES" in done.stderr, done.stderr
    for word in words:
        assert word in done.stderr, (word, done.stderr)


def test_a_store_whose_index_folder_is_gone_is_refused_by_every_reader(flushed, tmp_path):
    """Chroma opens it, counts every passage and searches only the vectors its log replays."""
    home, env, seg = _copy(flushed, tmp_path)
    shutil.rmtree(seg)
    listing = _cli(env, "stores")
    assert listing.returncode == 1 and listing.stdout.startswith("flushed\tCORRUPT: the vector index folder")
    search = _run(env, "search", "Ed Wood", "--store", "flushed")
    _refused(search, "does not add up", "vector index folder", "is missing")
    port = str(free_port())
    serve = _run(env, "serve-retriever", "--store", "flushed", "--port", port, timeout=120)
    _refused(serve, "does not add up")
    # the graphs (and serve, which builds them) go through the same factory
    from parallelsearch.graphs.factory import make_searcher
    from parallelsearch.settings import get_settings
    from parallelsearch.stores.store_files import StoreDamagedError

    cfg = get_settings(home=home, stores=["flushed"]).retrieval()
    with pytest.raises(StoreDamagedError, match="does not add up"):
        make_searcher(cfg)


@pytest.mark.parametrize(
    ("damage", "words"),
    [
        ("data_level0", ["is damaged"]),  # random bytes: Chroma's reader died by SIGSEGV
        ("header", ["is damaged"]),
        ("sqlite_cut", ["chroma.sqlite3 cannot be read"]),
        ("sqlite_header", ["chroma.sqlite3 cannot be read", "not a database"]),
    ],
)
def test_damaged_files_are_one_line_naming_the_store_not_a_crash(flushed, tmp_path, damage, words):
    import random

    home, env, seg = _copy(flushed, tmp_path)
    rng = random.Random(7)
    db = home / "chroma" / "chroma.sqlite3"
    if damage == "data_level0":
        with open(seg / "data_level0.bin", "r+b") as f:
            f.write(rng.randbytes(8192))
    elif damage == "header":
        with open(seg / "header.bin", "r+b") as f:
            f.seek(4)
            f.write(rng.randbytes(40))
    elif damage == "sqlite_cut":
        os.truncate(db, db.stat().st_size // 2)
    else:
        with open(db, "r+b") as f:
            f.write(b"not a database!!")
    _refused(_run(env, "search", "Ed Wood", "--store", "flushed"), *words)


def _overwrite_pages(db: Path, table: str) -> None:
    """Random bytes over every page of ``table`` in ``db`` (found by SQLite's ``dbstat``)."""
    import random
    import sqlite3

    conn = sqlite3.connect(db)
    try:
        size = conn.execute("PRAGMA page_size").fetchone()[0]
        pages = [r[0] for r in conn.execute("SELECT pageno FROM dbstat WHERE name = ?", (table,))]
    finally:
        conn.close()
    assert pages, table
    rng = random.Random(11)
    with open(db, "r+b") as f:
        for page in pages:
            f.seek((page - 1) * size)
            f.write(rng.randbytes(size))


@pytest.mark.parametrize("table", ["embeddings", "embedding_metadata"])
def test_overwritten_table_pages_are_refused_at_open_and_found_by_the_check(flushed, tmp_path, table):
    """Counting passages reads only an index of ``embeddings``: these pages passed the open check,
    and every search (and /health) then failed inside Chroma."""
    home, env, _ = _copy(flushed, tmp_path)
    _overwrite_pages(home / "chroma" / "chroma.sqlite3", table)
    finding = f"chroma.sqlite3 is damaged: its table {table} cannot be read"
    _refused(_run(env, "search", "Ed Wood", "--store", "flushed"), finding, "malformed")
    port = str(free_port())
    _refused(_run(env, "serve-retriever", "--store", "flushed", "--port", port, timeout=120), finding)
    check = _cli(env, "stores", "--check", "flushed")
    assert check.returncode == 1 and finding in check.stdout, check
    assert (
        "parallelsearch index --store flushed-new FILES" in check.stderr and "Traceback" not in check.stderr
    )


def _rot_every_vector(seg: Path) -> int:
    """Every vector of the index files reversed (finite, unit length, another vector): bit rot that
    no structural check can see. Returns how many vectors the index files hold."""
    import numpy as np

    from parallelsearch.stores.store_files import IndexGeometry

    g = IndexGeometry.parse((seg / "header.bin").read_bytes())
    data = np.memmap(seg / "data_level0.bin", dtype=np.uint8, mode="r+", shape=(g.count, g.element_size))
    vectors = data[:, g.data_offset : g.label_offset].view("<f4")
    vectors[:] = vectors[:, ::-1].copy()
    data.flush()
    del data
    return g.count


def test_overwritten_vectors_are_found_by_their_checksums_at_open_and_by_the_check(flushed, tmp_path):
    home, env, seg = _copy(flushed, tmp_path)
    assert _cli(env, "stores", "--check", "flushed").stdout.strip().endswith("all 40 match their checksums")
    indexed = _rot_every_vector(seg)
    _refused(
        _run(env, "search", "Ed Wood", "--store", "flushed"),
        "is damaged, so it is not opened",
        "differ from the checksum recorded when they were indexed",
    )
    found = json.loads(_cli(env, "stores", "--check", "flushed", "--json").stdout)
    assert not found["ok"] and len(found["rotted"]) == indexed and found["checksummed"] == 40, found
    check = _cli(env, "stores", "--check", "flushed")
    assert check.returncode == 1 and f"{indexed} of 40 vector(s) read back differ" in check.stdout, check
    assert "parallelsearch index --store flushed-new FILES" in check.stderr


def test_a_store_made_before_checksums_opens_and_says_they_are_absent(flushed, tmp_path):
    """Written as earlier versions wrote: passages with a title and no checksum."""
    import numpy as np

    from parallelsearch.stores.chroma_store import make_client

    home, env, _ = _copy(flushed, tmp_path)
    client = make_client(home / "chroma")
    meta = client.get_collection("flushed").metadata
    old = client.create_collection("old", metadata=meta, embedding_function=None)
    vectors = np.random.default_rng(3).standard_normal((10, meta["ps_dimension"])).astype(np.float32)
    old.add(
        ids=[f"p{i}" for i in range(10)],
        embeddings=vectors,
        documents=[f"old passage {i}" for i in range(10)],
        metadatas=[{"title": f"T{i}"} for i in range(10)],
    )
    del client, old
    search = _cli(env, "search", "old passage", "--store", "old")
    assert search.returncode == 0 and "old passage" in search.stdout, search
    assert "store old records no vector checksums" in search.stderr, search.stderr
    check = _cli(env, "stores", "--check", "old")
    assert check.returncode == 0 and "vector checksums are absent" in check.stdout, check


def test_index_verify_on_a_cut_sqlite_file_is_one_line_not_a_traceback(flushed, tmp_path):
    home, env, _ = _copy(flushed, tmp_path)
    db = home / "chroma" / "chroma.sqlite3"
    os.truncate(db, db.stat().st_size // 2)
    rows = str(flushed.parent / "rows.jsonl")
    verify = _run(env, "index", "--store", "flushed", "--verify", "--no-progress", rows)
    _refused(verify, "cannot be opened for writing", "malformed", "PARALLELSEARCH_CHROMA_PATH=NEW_FOLDER")


def _digests(home: Path) -> dict[str, str]:
    """Every file of the store but chroma.sqlite3 by content, and SQLite's data tables by rows."""
    import hashlib
    import sqlite3

    out = {}
    for path in sorted((home / "chroma").rglob("*")):
        if path.is_file() and path.name != "chroma.sqlite3":
            out[str(path.relative_to(home))] = hashlib.sha256(path.read_bytes()).hexdigest()
    conn = sqlite3.connect(f"file:{home / 'chroma' / 'chroma.sqlite3'}?mode=ro", uri=True)
    try:
        for table in ("collections", "segments", "max_seq_id", "embeddings", "embedding_metadata",
                      "embeddings_queue", "collection_metadata"):  # fmt: skip
            rows = sorted(map(repr, conn.execute(f"SELECT * FROM {table}")))
            out[table] = hashlib.sha256("\n".join(rows).encode()).hexdigest()
    finally:
        conn.close()
    return out


def test_reading_a_store_changes_none_of_its_data_and_creates_nothing(flushed, tmp_path):
    home, env, _ = _copy(flushed, tmp_path)
    before = _digests(home)
    assert _cli(env, "search", "Ed Wood", "--store", "flushed").returncode == 0
    assert _cli(env, "stores", "--check", "flushed").returncode == 0
    assert _digests(home) == before
    empty = tmp_path / "empty-home"
    missing = _cli(_env(empty), "search", "Ed Wood", "--store", "flushed")
    assert missing.returncode == 2 and "no store" in missing.stderr, missing.stderr
    assert not empty.exists(), sorted(empty.rglob("*"))  # a search creates no store folder


def _read_only(folder: Path):
    """``folder`` made read-only for this process: a read-only bind mount as root (root may write
    any file), permissions otherwise; None when neither can be done here."""
    import contextlib

    @contextlib.contextmanager
    def mounted():
        subprocess.run(["mount", "--bind", str(folder), str(folder)], check=True, capture_output=True)
        try:
            subprocess.run(["mount", "-o", "remount,bind,ro", str(folder)], check=True, capture_output=True)
            yield
        finally:
            subprocess.run(["umount", str(folder)], capture_output=True)

    @contextlib.contextmanager
    def chmodded():
        paths = [folder, *folder.rglob("*")]
        for p in paths:
            p.chmod(p.stat().st_mode & ~0o222)
        try:
            yield
        finally:
            for p in paths:
                p.chmod(p.stat().st_mode | 0o200)

    if os.geteuid() != 0:
        return chmodded()
    probe = subprocess.run(["mount", "--bind", str(folder), str(folder)], capture_output=True)
    if probe.returncode != 0:
        return None
    subprocess.run(["umount", str(folder)], capture_output=True)
    return mounted()


def test_a_read_only_store_is_reported_as_read_only_not_corrupt(flushed, tmp_path):
    home, env, _ = _copy(flushed, tmp_path)
    ro = _read_only(home / "chroma")
    if ro is None:
        pytest.skip("cannot make a read-only folder here (root without mount permission)")
    with ro:
        listing = _cli(env, "stores")
        assert listing.returncode == 0, listing
        assert listing.stdout.startswith("flushed\t40\tREAD-ONLY: this process may not write"), listing.stdout
        assert "CORRUPT" not in listing.stdout + listing.stderr and "cp -a" in listing.stderr
        check = _cli(env, "stores", "--check", "flushed")
        assert check.returncode == 0 and "READ-ONLY" in check.stdout and "files add up (40" in check.stdout
        search = _cli(env, "search", "Ed Wood", "--store", "flushed")
        assert (
            search.returncode == 2 and "store flushed at" in search.stderr and "is read-only" in search.stderr
        )
        assert "Traceback" not in search.stderr
