"""A corpus jsonl read by line number: line i is the passage of row i of a FAISS flat index (the
layout of Search-R1's ``wiki-18.jsonl`` beside ``e5_Flat.index``), opened as is, never copied.

The start of every line is found once (a pass over the file in large blocks) and kept beside the
store (``corpus.offsets.npy``, keyed by the corpus's size and modification time), so a later open
maps it instead of reading the corpus again; a passage is then one ``pread``. A folder this process
may not write keeps the offsets in memory only.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np

from parallelsearch.stores.passages import Passage, split_contents, to_contents

#: bytes read per block while the line starts are found
_BLOCK = 64 << 20


def _line_starts(path: Path) -> np.ndarray:
    """The byte offset of every line of ``path`` (a last line without its newline counts)."""
    starts = [np.zeros(1, dtype=np.int64)]
    size = 0
    with path.open("rb") as f:
        while block := f.read(_BLOCK):
            ends = np.flatnonzero(np.frombuffer(block, dtype=np.uint8) == 10).astype(np.int64)
            starts.append(ends + size + 1)
            size += len(block)
    offsets = np.concatenate(starts)
    return offsets[:-1] if offsets[-1] >= size else offsets  # a final newline starts no line


def _stamp(path: Path) -> list[int]:
    st = path.stat()
    return [st.st_size, st.st_mtime_ns]


def line_offsets(corpus: Path, cache: Path | None) -> np.ndarray:
    """The line starts of ``corpus``, from ``cache`` when it was made from this very file."""
    key = cache.with_suffix(".json") if cache is not None else None
    if cache is not None and key is not None and cache.exists() and key.exists():
        if json.loads(key.read_text()) == _stamp(corpus):
            return np.load(cache, mmap_mode="r")
    offsets = _line_starts(corpus)
    if cache is not None and key is not None and os.access(cache.parent, os.W_OK):
        np.save(cache, offsets)
        key.write_text(json.dumps(_stamp(corpus)))
    return offsets


def passage_of(raw: bytes, where: str) -> Passage:
    """One corpus line as a passage: Search-R1's ``{"id", "contents"}`` or ``{"id", "title", "text"}``."""
    try:
        rec = json.loads(raw)
        if "contents" in rec:
            title, text = split_contents(rec["contents"])
        else:
            title, text = rec.get("title", ""), rec["text"]
        return Passage(str(rec["id"]), title, text)
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise ValueError(f"{where}: not a corpus record ({type(e).__name__}: {e})"[:300]) from e


class CorpusLines:
    """The lines of a corpus jsonl by number; appends keep the offsets current."""

    def __init__(self, path: Path, cache: Path | None = None) -> None:
        self.path = path
        self._cache = cache
        self._offsets = line_offsets(path, cache) if path.exists() else np.zeros(0, dtype=np.int64)
        self._fd: int | None = None
        self._changed = False

    def __len__(self) -> int:
        return len(self._offsets)

    def _file(self) -> int:
        if self._fd is None:
            self._fd = os.open(self.path, os.O_RDONLY)
        return self._fd

    def raw(self, row: int) -> bytes:
        start = int(self._offsets[row])
        end = int(self._offsets[row + 1]) if row + 1 < len(self._offsets) else self.path.stat().st_size
        return os.pread(self._file(), end - start, start)

    def passage(self, row: int) -> Passage:
        return passage_of(self.raw(row), f"{self.path}:{row + 1}")

    def passages(self, rows: Sequence[int]) -> list[Passage]:
        return [self.passage(int(r)) for r in rows]

    def ids(self) -> Iterable[str]:
        """Every passage id in row order (one pass over the corpus)."""
        if not self.path.exists():
            return
        with self.path.open("rb") as f:
            for n, line in enumerate(f, 1):
                yield passage_of(line, f"{self.path}:{n}").id

    def truncate(self, rows: int) -> None:
        """Drop the lines past ``rows`` (what an interrupted append wrote before its vectors)."""
        size = int(self._offsets[rows]) if rows < len(self._offsets) else self.path.stat().st_size
        os.truncate(self.path, size)
        self._offsets = np.asarray(self._offsets[:rows]).copy()
        self._changed = True

    def append(self, passages: Sequence[Passage]) -> None:
        """Write ``passages`` as Search-R1 records, synced to disk before the caller adds their vectors."""
        lines = [
            (
                json.dumps({"id": p.id, "contents": to_contents(p.title, p.text)}, ensure_ascii=False) + "\n"
            ).encode()
            for p in passages
        ]
        start = self.path.stat().st_size if self.path.exists() else 0
        with self.path.open("ab") as f:
            if start and os.pread(self._file(), 1, start - 1) != b"\n":  # a last line without its newline
                f.write(b"\n")
                start += 1
            f.write(b"".join(lines))
            f.flush()
            os.fsync(f.fileno())
        sizes = np.cumsum([0] + [len(line) for line in lines[:-1]], dtype=np.int64)
        self._offsets = np.concatenate([np.asarray(self._offsets), start + sizes])
        self._changed = True

    def close(self) -> None:
        """Close the file; offsets changed by appends are kept for the next open."""
        if self._changed and self._cache is not None:
            np.save(self._cache, np.asarray(self._offsets))
            self._cache.with_suffix(".json").write_text(json.dumps(_stamp(self.path)))
            self._changed = False
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
