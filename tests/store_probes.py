"""What graph and CLI tests make of a real store: a small one indexed through ``parallelsearch
index``, and a record of every batch a store encodes."""

from __future__ import annotations

import contextlib
import io
import logging
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest


def index_sample(tmp_path: Path, capsys: pytest.CaptureFixture[str] | None, records: int = 3) -> str:
    """A store named ``hp-sample`` of the shipped HotpotQA sample's first ``records`` records,
    made by ``index`` (its output swallowed); returns the store's name. Tests that only read or
    ask it take the conftest's ``sample_store`` instead (a copy of one made per session)."""
    from parallelsearch.cli import main
    from parallelsearch.demo_data import HOTPOTQA_SAMPLE

    lines = HOTPOTQA_SAMPLE.read_text(encoding="utf-8").splitlines()[:records]
    sample = tmp_path / f"hotpotqa_sample_{records}.jsonl"
    sample.write_text("\n".join(lines) + "\n", encoding="utf-8")
    assert main(["index", "--store", "hp-sample", str(sample), "--no-progress"]) == 0
    if capsys is not None:
        capsys.readouterr()
    return "hp-sample"


def cli(home: Path, *args: str) -> subprocess.CompletedProcess:
    """``parallelsearch ARGS`` with ``home`` as its settings home, run in this process, as a fresh
    process would run it: Chroma's per-process cache of open stores is set aside first (what it
    reads is what is on disk), the environment is put back after. A child process would add only its
    start, seconds of Python, torch and encoder imports each, where a test is not about a process;
    stores are still read in the command's own child process where it makes one."""
    from chromadb.api.shared_system_client import SharedSystemClient as Shared

    from parallelsearch.cli import main

    cached, environ = (Shared._identifier_to_system, Shared._identifier_to_refcount), dict(os.environ)
    Shared.clear_system_cache()
    out, err = io.StringIO(), io.StringIO()
    os.environ.update(PARALLELSEARCH_HOME=str(home), HF_HUB_OFFLINE="1")
    os.environ.pop("PARALLELSEARCH_CHROMA_PATH", None)
    # a fresh process has no log handler, so Python writes warnings to stderr; pytest has its own
    last_resort = logging.StreamHandler(err)
    last_resort.setLevel(logging.WARNING)
    logging.getLogger().addHandler(last_resort)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(list(args))
    except SystemExit as e:  # argparse refusing the arguments
        code = e.code if isinstance(e.code, int) else 2
    finally:
        logging.getLogger().removeHandler(last_resort)
        Shared._identifier_to_system, Shared._identifier_to_refcount = cached
        os.environ.clear()
        os.environ.update(environ)
    return subprocess.CompletedProcess(["parallelsearch", *args], code, out.getvalue(), err.getvalue())


def counting_batches(store: Any, monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """Every batch ``store`` encodes from now on, in order (one encoder call and one Chroma query each).

    A round's sub-queries share a batch when they reach the store's coalescer within its window
    (2 ms). In a sync run each search node hops through a worker thread first, and on a loaded
    machine that hop alone can take longer; the window is widened here so the batches counted
    depend on the graph's fan-out, not on how the threads were scheduled."""
    batches: list[list[str]] = []
    original = store.search_batch
    monkeypatch.setattr(store._coalescer, "_window_s", 0.5)

    def search_batch(queries, k=3):
        batches.append(list(queries))
        return original(queries, k)

    monkeypatch.setattr(store, "search_batch", search_batch)
    return batches


class CachingEncoder:
    """An embedder's ``encode_passages``, each distinct text encoded once: ``ingest(...,
    encoder=...)`` for tests that index the same passages into several stores."""

    def __init__(self, embedder: Any):
        self.embedder, self.vectors = embedder, {}

    def encode_passages(self, texts: list[str], batch_size: int = 64) -> Any:
        import numpy as np

        new = [t for t in dict.fromkeys(texts) if t not in self.vectors]
        if new:
            self.vectors.update(
                zip(new, self.embedder.encode_passages(new, batch_size=batch_size), strict=True)
            )
        return np.stack([self.vectors[t] for t in texts])
