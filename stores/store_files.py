"""A cheap look at an embedded store's files before Chroma opens them for reading.

Chroma keeps a collection's passages in ``chroma.sqlite3`` and its vectors in an HNSW index
folder it writes every ``sync_threshold`` additions (the rest wait in SQLite's log). A store
whose index folder is gone still opens, counts every passage and searches only the vectors the
log replays, without a word; a damaged index file kills the reader with SIGSEGV. So a store
opened for reading is looked at here first, without Chroma, read-only: the index's element
count against SQLite's passages and log, and every link of the index within bounds
(docs/architecture.md, "Reading a store"). SQLite is opened with ``mode=ro``; nothing is written.
"""

from __future__ import annotations

import os
import sqlite3
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple
from urllib.parse import quote

import numpy as np

from parallelsearch.stores.errors import ParallelSearchError, StoreNotFoundError
from parallelsearch.stores.sqlite_sample import full_check, sample_tables

SQLITE_FILE = "chroma.sqlite3"
INDEX_FILES = ("header.bin", "data_level0.bin", "length.bin", "link_lists.bin")
#: hnswlib's header as Chroma's fork writes it: version, then the index's geometry
_HEADER = struct.Struct("<iQQQQQQiIQQQdQ")
_DELETE = 3  # Chroma's log operation code for a delete
_CHUNK = 65_536  # index elements checked at a time (bounded memory on large stores)


class StoreDamagedError(ParallelSearchError, RuntimeError):
    """A store's files do not add up (or Chroma could not read them): searching it would answer
    wrongly or crash. The message names the store, the finding and the repair."""


class StoreReadOnlyError(ParallelSearchError, PermissionError):
    """This process may not write the store's folder, and Chroma 1.x writes ``chroma.sqlite3``
    even to read (it records every client); the message says what to do."""


def repair_hint(store: str, *, new_folder: bool = False) -> str:
    """The repair that holds (docs/architecture.md, "Writing a store"): a new store from the files;
    in a new folder when the damage is in ``chroma.sqlite3``, which every store of a folder shares."""
    if new_folder:
        return (
            f"Index the files store {store} came from into a new store in a new folder "
            f"(PARALLELSEARCH_CHROMA_PATH=NEW_FOLDER parallelsearch index --store {store}-new FILES): "
            f"{SQLITE_FILE} is shared by every store of this folder"
        )
    return (
        f"Index the files store {store} came from into a new store "
        f"(parallelsearch index --store {store}-new FILES) and search that one"
    )


@dataclass
class StoreFiles:
    """What the files of one store say: passages in SQLite, vectors in the index and in the log."""

    store: str
    location: str
    passages: int = 0
    indexed: int = 0
    pending: int = 0
    problems: list[str] = field(default_factory=list)
    #: the index files themselves are missing or damaged (Chroma would crash on them or write new ones)
    index_broken: bool = False
    #: ids of passages the sampled table read met (the open check reads their vectors back)
    sample_ids: list[str] = field(default_factory=list)
    #: the damage is in chroma.sqlite3, which every store of the folder shares
    sqlite_broken: bool = False

    @property
    def ok(self) -> bool:
        return not self.problems

    def describe(self) -> str:
        return "; ".join(self.problems)


def read_only_reason(chroma_path: Path) -> str | None:
    """Why this process cannot write the store folder (Chroma must, even to read), or None."""
    for target in (chroma_path, chroma_path / SQLITE_FILE):
        if target.exists() and not os.access(target, os.W_OK):
            return f"this process may not write {target}"
    return None


def read_only_message(chroma_path: Path, store: str, reason: str) -> str:
    return (
        f"store {store} at {chroma_path} is read-only ({reason}); Chroma writes chroma.sqlite3 even to "
        "read a store, so it cannot be opened here: give this user write access, or copy the folder "
        f"(cp -a {chroma_path} NEW_FOLDER) and set PARALLELSEARCH_CHROMA_PATH=NEW_FOLDER"
    )


def _connect(chroma_path: Path) -> sqlite3.Connection:
    db = chroma_path / SQLITE_FILE
    if not db.is_file():
        raise StoreNotFoundError(f"no stores at {chroma_path} yet (create one with index)")
    return sqlite3.connect(f"file:{quote(str(db))}?mode=ro", uri=True, timeout=10)


def sqlite_store_names(chroma_path: Path) -> list[str]:
    """The stores (collections) ``chroma.sqlite3`` lists, read without Chroma."""
    try:
        with _connect(chroma_path) as conn:
            return sorted(row[0] for row in conn.execute("SELECT name FROM collections"))
    except sqlite3.DatabaseError as e:
        raise StoreDamagedError(
            f"the stores at {chroma_path} cannot be listed: {SQLITE_FILE} cannot be read ({e})"
        ) from e


def inspect_store(chroma_path: str | Path, name: str, *, every_page: bool = False) -> StoreFiles:
    """What the files of store ``name`` at ``chroma_path`` say (see the module docstring); with
    ``every_page``, SQLite also checks every page of its file (``stores --check``: linear in its size)."""
    chroma_path = Path(chroma_path)
    found = StoreFiles(store=name, location=str(chroma_path))
    try:
        with _connect(chroma_path) as conn:
            cat = _counts(conn, name, found)
            sample = sample_tables(conn, cat.metadata, cat.collection)
            if every_page:
                sample.problems.extend(full_check(conn))
    except sqlite3.DatabaseError as e:
        found.problems.append(f"{SQLITE_FILE} cannot be read ({e})")
        found.index_broken = found.sqlite_broken = True
        return found
    found.sample_ids = sample.passage_ids
    if sample.problems:  # Chroma would fail every search that meets these pages
        found.problems.extend(f"{SQLITE_FILE} is damaged: {p}" for p in sample.problems)
        found.index_broken = found.sqlite_broken = True
        return found
    _check_index(chroma_path / cat.vector, cat.dimension, cat.flushed, found)
    found.index_broken = bool(found.problems)
    if found.ok and found.indexed + found.pending < found.passages:
        lost = found.passages - found.indexed - found.pending
        found.problems.append(
            f"SQLite lists {found.passages} passages, but the vector index holds {found.indexed} and the log "
            f"{found.pending} more: {lost} passages cannot be found by search"
        )
    return found


class _Catalogue(NamedTuple):
    """What SQLite's catalogue says of one store: its collection and segment ids (the vector
    segment's id names its index folder), its dimension and the last log entry written into the
    index (0: none yet)."""

    collection: str
    vector: str
    metadata: str
    dimension: int
    flushed: int


def _counts(conn: sqlite3.Connection, name: str, found: StoreFiles) -> _Catalogue:
    """Fill in the passage and log counts; what the catalogue says of the store."""
    row = conn.execute("SELECT id, dimension FROM collections WHERE name = ?", (name,)).fetchone()
    if row is None:
        from parallelsearch.stores.errors import missing_store_error

        existing = [r[0] for r in conn.execute("SELECT name FROM collections")]
        raise missing_store_error(name, found.location, existing)
    collection, dimension = row
    segments = dict(conn.execute("SELECT scope, id FROM segments WHERE collection = ?", (collection,)))
    if "VECTOR" not in segments or "METADATA" not in segments:
        raise sqlite3.DatabaseError(
            f"store {name!r} has no {'VECTOR' if 'VECTOR' not in segments else 'METADATA'} segment"
        )
    seq = dict(conn.execute("SELECT segment_id, seq_id FROM max_seq_id"))
    flushed = _seq(seq.get(segments["VECTOR"]))
    (found.passages,) = conn.execute(
        "SELECT count(*) FROM embeddings WHERE segment_id = ?", (segments["METADATA"],)
    ).fetchone()
    (found.pending,) = conn.execute(
        "SELECT count(*) FROM embeddings_queue WHERE topic LIKE ? AND seq_id > ? AND operation != ?",
        (f"%{collection}", flushed, _DELETE),
    ).fetchone()
    return _Catalogue(collection, segments["VECTOR"], segments["METADATA"], int(dimension or 0), flushed)


def _seq(value: object) -> int:
    """A ``max_seq_id``: an integer, or big-endian bytes in older stores."""
    if value is None:
        return 0
    if isinstance(value, bytes):
        return int.from_bytes(value, "big")
    return int(value)  # type: ignore[call-overload]  # SQLite gives an int here


def _check_index(folder: Path, dimension: int, flushed: int, found: StoreFiles) -> None:
    """The index folder's files: present once anything was written to them, and consistent."""
    if not folder.is_dir():
        if flushed:
            found.problems.append(
                f"the vector index folder {folder} is missing, though {flushed} log entries were written to it"
            )
        return
    missing = [f for f in INDEX_FILES if not (folder / f).is_file()]
    if missing:
        found.problems.append(f"the vector index in {folder} lacks {', '.join(missing)}")
        return
    raw = (folder / "header.bin").read_bytes()
    if len(raw) < _HEADER.size:
        found.problems.append(f"{folder / 'header.bin'} is {len(raw)} bytes, shorter than a header")
        return
    geometry = IndexGeometry.parse(raw)
    problem = geometry.problem(dimension) or geometry.size_problem(folder)
    if problem:
        found.problems.append(f"the vector index in {folder} is damaged: {problem}")
        return
    found.indexed = geometry.count
    problem = geometry.level0_problem(folder / "data_level0.bin") or geometry.upper_problem(
        folder / "link_lists.bin"
    )
    if problem:
        found.problems.append(f"the vector index in {folder} is damaged: {problem}")


@dataclass(frozen=True)
class IndexGeometry:
    """The numbers of hnswlib's header that every file of the index must agree with."""

    max_elements: int
    count: int
    element_size: int
    label_offset: int
    data_offset: int
    max_level: int
    entry: int
    max_m: int
    max_m0: int

    @classmethod
    def parse(cls, raw: bytes) -> IndexGeometry:
        v = _HEADER.unpack_from(raw)
        return cls(v[2], v[3], v[4], v[5], v[6], v[7], v[8], v[9], v[10])

    def problem(self, dimension: int) -> str | None:
        """Why the header cannot describe an index of ``dimension``-sized vectors."""
        expected = (4 + 4 * self.max_m0, 4 + 4 * self.max_m0 + 4 * dimension)
        if not 2 <= self.max_m <= 4096 or self.max_m0 < self.max_m or self.max_m0 > 8192:
            return f"its header gives M={self.max_m}, M0={self.max_m0}"
        if (self.data_offset, self.label_offset) != expected or self.element_size != expected[1] + 8:
            return f"its header does not describe {dimension}-dimensional vectors"
        if self.count > self.max_elements:
            return f"its header counts {self.count} elements in room for {self.max_elements}"
        if self.count and not (0 <= self.entry < self.count and 0 <= self.max_level <= 64):
            return (
                f"its entry point {self.entry} (level {self.max_level}) is outside its {self.count} elements"
            )
        return None

    def size_problem(self, folder: Path) -> str | None:
        need = {"data_level0.bin": self.count * self.element_size, "length.bin": self.count * 4}
        for name, size in need.items():
            have = (folder / name).stat().st_size
            if have < size:
                return f"{name} is {have} bytes, {size} needed for {self.count} elements"
        return None

    def level0_problem(self, path: Path) -> str | None:
        """Level 0, in chunks: neighbour counts within M0, neighbours within the index, finite vectors."""
        if not self.count:
            return None
        data = np.memmap(path, dtype=np.uint8, mode="r", shape=(self.count, self.element_size))
        dim = (self.label_offset - self.data_offset) // 4
        for start in range(0, self.count, _CHUNK):
            block = np.ascontiguousarray(data[start : start + _CHUNK])
            counts = block[:, 0:2].view("<u2")[:, 0]
            links = block[:, 4 : self.data_offset].view("<u4")
            if counts.max() > self.max_m0:
                return f"element {start + int(counts.argmax())} claims {int(counts.max())} neighbours"
            used = np.arange(self.max_m0) < counts[:, None]
            if used.any() and links[used].max() >= self.count:
                return f"a neighbour of element {start}.. is outside the {self.count} elements"
            vectors = block[:, self.data_offset : self.label_offset].view("<f4").reshape(-1, dim)
            if not np.isfinite(vectors).all():
                return f"a vector of element {start}.. is not finite"
        return None

    def upper_problem(self, path: Path) -> str | None:
        """The upper levels (``link_lists.bin``: per element a byte size, then its levels' links)."""
        raw = path.read_bytes()
        level_size = 4 + 4 * self.max_m
        pos, blocks = 0, []
        for i in range(self.count):
            if pos + 4 > len(raw):
                return f"link_lists.bin ends at element {i}"
            (size,) = struct.unpack_from("<I", raw, pos)
            pos += 4
            if size % level_size or size // level_size > self.max_level:
                return f"element {i} has upper links of {size} bytes"
            if size:
                blocks.append(raw[pos : pos + size])
                pos += size
        if pos > len(raw):
            return "link_lists.bin is shorter than its sizes say"
        if blocks:
            levels = np.frombuffer(b"".join(blocks), dtype="<u4").reshape(-1, 1 + self.max_m)
            counts = levels[:, 0] & 0xFFFF
            if counts.max() > self.max_m:
                return f"an upper level claims {int(counts.max())} neighbours (M={self.max_m})"
            used = np.arange(self.max_m) < counts[:, None]
            if used.any() and levels[:, 1:][used].max() >= self.count:
                return f"an upper-level neighbour is outside the {self.count} elements"
        return None


def require_sound_store(chroma_path: str | Path, name: str) -> StoreFiles:
    """:func:`inspect_store`, refusing a store that is read-only to this process or does not add
    up (naming it and the repair), before Chroma touches its files."""
    chroma_path = Path(chroma_path)
    if not chroma_path.is_dir():
        from parallelsearch.stores.errors import missing_store_error

        raise missing_store_error(name, str(chroma_path), [])
    reason = read_only_reason(chroma_path)
    if reason:
        raise StoreReadOnlyError(read_only_message(chroma_path, name, reason))
    found = inspect_store(chroma_path, name)
    if not found.ok:
        raise StoreDamagedError(
            f"store {name} at {chroma_path} does not add up, so it is not opened: {found.describe()}. "
            f"{repair_hint(name, new_folder=found.sqlite_broken)}"
        )
    return found
