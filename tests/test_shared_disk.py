"""Servers and stores that share a disk: one server per SQLite threads file, lock files that are
never written through a link, and store writes that fail in one line (a full disk, a read-only
folder) and resume without duplicates. Real servers on 127.0.0.1, real stores, real processes.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from conftest import UvicornThread, long_work, needs_data

from parallelsearch.agents.policies import ScriptedPolicy
from parallelsearch.cli import main
from parallelsearch.serving.server import create_app
from parallelsearch.settings import Settings

SCRIPT = [
    "<think>two</think><search> Scott Derrickson ## Ed Wood </search>",
    "<think>both American</think><answer> yes </answer>",
]

HOLD_THREADS_FILE = """
import sys, time
from pathlib import Path
from parallelsearch.serving.checkpointers import claim_threads_file
with claim_threads_file(Path(sys.argv[1])):
    print("held", flush=True)
    time.sleep(600)
"""


# ---- one server per threads file -------------------------------------------------------------------
@needs_data
def test_a_second_serve_on_one_sqlite_threads_file_is_refused_naming_the_file_and_pid(
    hotpot_store, tmp_path, capsys, monkeypatch
):
    db = tmp_path / "threads.sqlite"
    settings = Settings(server_checkpointer="sqlite", server_checkpoint_url=str(db))
    app = create_app(settings, policy=ScriptedPolicy(SCRIPT), searcher=hotpot_store)
    monkeypatch.setenv("PARALLELSEARCH_CHROMA_PATH", hotpot_store.location)
    serve = ["serve", "--store", hotpot_store.name, "--policy", "oracle", "--checkpoint-url", str(db)]
    with UvicornThread(app) as srv:
        assert httpx.get(srv.url + "/health", timeout=30).status_code == 200
        assert main(serve) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and "Traceback" not in err, err
        assert str(db) in err and f"pid {os.getpid()}" in err and "postgres" in err, err
    # the first server stopped: its lock went with it
    from parallelsearch.serving.checkpointers import claim_threads_file

    with claim_threads_file(db) as lock:
        assert lock.held


def test_the_threads_file_lock_goes_when_its_holder_is_killed(tmp_path):
    from parallelsearch.serving.checkpointers import claim_threads_file

    db = tmp_path / "threads.sqlite"
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD_THREADS_FILE, str(db)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        with pytest.raises(Exception, match=f"pid {holder.pid}"), claim_threads_file(db):
            pass
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=60)
    with claim_threads_file(db) as lock:  # the kernel dropped the dead holder's flock
        assert lock.held


# ---- no write through a link -----------------------------------------------------------------------
def _victim(tmp_path: Path) -> Path:
    victim = tmp_path / "precious.txt"
    victim.write_text("do not truncate me\n", encoding="utf-8")
    return victim


def test_a_store_lock_file_that_is_a_link_is_refused_and_its_target_kept(tmp_path, capsys, monkeypatch):
    from parallelsearch.settings import get_settings
    from parallelsearch.stores.store_lock import lock_path

    monkeypatch.setenv("PARALLELSEARCH_HOME", str(tmp_path / "home"))
    data = tmp_path / "one.jsonl"
    data.write_text(json.dumps({"title": "T", "text": "a passage of some length here"}) + "\n")
    victim = _victim(tmp_path)
    link = lock_path(get_settings().chroma_path, "linked")
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(victim)
    assert main(["index", "--store", "linked", "--no-progress", str(data)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "symbolic link" in err and str(link) in err, err
    assert victim.read_text(encoding="utf-8") == "do not truncate me\n"
    link.unlink()
    os.link(victim, link)  # a hard link points the writes at the same file
    assert main(["index", "--store", "linked", "--no-progress", str(data)]) == 2
    assert "hard link" in capsys.readouterr().err
    assert victim.read_text(encoding="utf-8") == "do not truncate me\n"


def test_the_threads_file_lock_is_not_written_through_a_link(tmp_path):
    from parallelsearch.serving.checkpointers import claim_threads_file
    from parallelsearch.stores.safe_files import UnsafeFileError

    victim = _victim(tmp_path)
    db = tmp_path / "threads.sqlite"
    (tmp_path / "threads.sqlite.lock").symlink_to(victim)
    with pytest.raises(UnsafeFileError, match="symbolic link"), claim_threads_file(db):
        pass
    assert victim.read_text(encoding="utf-8") == "do not truncate me\n"


def test_a_lock_file_is_never_truncated(tmp_path):
    """The holder is written over a fixed record; a longer file keeps its length."""
    from parallelsearch.stores.safe_files import RECORD_BYTES, LockFile, read_holder

    path = tmp_path / "x.lock"
    path.write_bytes(b" " * (RECORD_BYTES * 3))
    lock = LockFile(path)
    assert lock.try_acquire()
    assert read_holder(path)["pid"] == os.getpid() and path.stat().st_size == RECORD_BYTES * 3
    other = LockFile(path)
    assert not other.try_acquire()
    lock.release()
    assert read_holder(path) == {} and path.stat().st_size == RECORD_BYTES * 3
    assert other.try_acquire()
    other.release()


def test_a_link_among_a_stores_files_is_refused_before_chroma_writes(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("PARALLELSEARCH_HOME", str(tmp_path / "home"))
    data = tmp_path / "one.jsonl"
    data.write_text(json.dumps({"title": "T", "text": "a passage of some length here"}) + "\n")
    assert main(["index", "--store", "sss", "--no-progress", str(data)]) == 0
    capsys.readouterr()
    chroma = tmp_path / "home" / "chroma"
    segment = next(p for p in chroma.iterdir() if p.is_dir())
    victim = _victim(tmp_path)
    target = segment / "link_lists.bin"
    if target.exists():
        target.unlink()
    target.symlink_to(victim)
    more = tmp_path / "two.jsonl"
    more.write_text(json.dumps({"title": "U", "text": "another passage of some length"}) + "\n")
    assert main(["index", "--store", "sss", "--no-progress", str(more)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "symbolic link" in err and str(target) in err, err
    assert victim.read_text(encoding="utf-8") == "do not truncate me\n"


# ---- a full disk, a read-only folder -----------------------------------------------------------------
def _passages(tmp_path: Path, n: int) -> Path:
    from test_store_lock import _sentences, _write

    return _write(tmp_path / f"p{n}.jsonl", _sentences(n))


def _added(out: str) -> tuple[int, int]:
    """``added`` and ``already present`` of an ``index`` run's summary line."""
    line = next(x for x in out.splitlines() if "added " in x)
    return int(line.split("added ")[1].split(",")[0]), int(line.split("already present ")[1].split(",")[0])


@needs_data
@pytest.mark.parametrize(("code", "said"), [(28, "is full"), (30, "read-only")], ids=["ENOSPC", "EROFS"])
def test_a_disk_that_refuses_a_write_is_one_line_and_a_rerun_adds_no_duplicates(
    tmp_path, capsys, monkeypatch, code, said
):
    """The third chunk's write fails as the disk would fail it (injected at the store's write seam);
    the rerun once it is fixed adds the rest, none twice, and every vector reads back."""
    from parallelsearch.stores.chroma_store import ChromaStore

    monkeypatch.setenv("PARALLELSEARCH_HOME", str(tmp_path / "home"))
    data = _passages(tmp_path, 40)
    real, calls = ChromaStore._upsert, []

    def failing(self, passages, embeddings):
        calls.append(len(passages))
        if len(calls) == 3:
            raise OSError(code, os.strerror(code))
        return real(self, passages, embeddings)

    monkeypatch.setattr(ChromaStore, "_upsert", failing)
    index = ["index", "--store", "disk", "--no-progress", "--chunk-size", "8", "--batch-size", "8", str(data)]
    assert main(index) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and said in err and "run the same command again" in err, err
    monkeypatch.setattr(ChromaStore, "_upsert", real)
    assert main(index) == 0
    assert _added(capsys.readouterr().out) == (24, 16)
    assert main(["stores", "--check", "disk"]) == 0
    assert "all 40 vectors read back" in capsys.readouterr().out


def _mount_tmpfs(folder: Path, size: str) -> bool:
    folder.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)], capture_output=True
    )
    return done.returncode == 0


@needs_data
@pytest.mark.slow
@long_work
def test_a_real_full_disk_then_space_freed(tmp_path, capsys, monkeypatch):
    """A 2 MB tmpfs fills during ``index`` (real Chroma, real ENOSPC, in a process of its own); after
    it is grown, the same command finishes the store with no passage twice (here, in this process).
    Needs the right to mount (root)."""
    disk = tmp_path / "disk"
    if os.geteuid() != 0 or not _mount_tmpfs(disk, "2m"):
        pytest.skip("mounting a small tmpfs needs root (the injected test above covers the seam)")
    try:
        data = _passages(tmp_path, 1500)
        env = dict(os.environ, PARALLELSEARCH_HOME=str(disk / "home"), HF_HUB_OFFLINE="1")
        index = ["index", "--store", "full", "--no-progress", str(data)]
        first = subprocess.run(
            [sys.executable, "-m", "parallelsearch.cli", *index], env=env, capture_output=True, text=True, timeout=1200
        )  # fmt: skip
        assert first.returncode == 2, first
        err = first.stderr.strip()
        assert len(err.splitlines()) == 1 and "is full" in err and "Traceback" not in err, err
        subprocess.run(["mount", "-o", "remount,size=256m", str(disk)], check=True)
        monkeypatch.setenv("PARALLELSEARCH_HOME", str(disk / "home"))
        assert main(index) == 0
        out = capsys.readouterr().out
        added, present = _added(out)
        assert main(["stores", "--check", "full"]) == 0
        assert f"total {added + present}" in out and added + present == 1500, out
    finally:
        subprocess.run(["umount", "-l", str(disk)], capture_output=True)
