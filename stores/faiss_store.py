"""The FAISS store kind: a flat index and its corpus jsonl, row i of the index = line i of the corpus.

This is the layout of the index the ParallelSearch and Search-R1 papers publish (``e5_Flat.index``
beside ``wiki-18.jsonl``, 21M passages of e5-base-v2), opened as is: no copy into another store.
A store is a folder ``<store folder>/<name>/`` (``RetrievalConfig.kind_folder``: ``--store-path``,
else ``<home>/faiss``): its ``*.index`` and ``*.jsonl``, or a ``store.json`` naming them anywhere
(``{"index": "/data/e5_Flat.index", "corpus": "/data/wiki-18.jsonl"}``) and recording the model,
backend and passage budget of a store this project wrote. On a CPU the index is memory-mapped
(``mapped_read_flags``), so processes opening it share the page cache; with GPUs (``faiss-gpu``) it
is copied to all of them in fp16, sharded, as Search-R1's retrieval server does. Search is exact.

The corpus is read by line number: the start of every line is found once (a pass over the file in
large blocks) and kept beside the store (``corpus.offsets.npy``, keyed by the corpus's size and
modification time), so a later open maps it instead of reading the corpus again; a passage is then
one ``pread``. A folder this process may not write keeps the offsets in memory only.

The last section is the kind as configuration opens it (``graphs.factory.STORE_KINDS``' row): for
reading, for writing (one writer at a time), listed (``stores``) and checked (``--check``, ``--verify``).
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from parallelsearch.stores.chroma_store import TIE_MARGIN, corpus_fingerprint
from parallelsearch.stores.coalesced_search import VectorSearch
from parallelsearch.stores.config import RetrievalConfig
from parallelsearch.stores.encoding.backend import embedding_family
from parallelsearch.stores.encoding.embedder import Embedder, make_embedder
from parallelsearch.stores.errors import ModelMismatchError, ParallelSearchError, missing_store_error
from parallelsearch.stores.ingestion.vector_files import import_faiss, mapped_read_flags
from parallelsearch.stores.passage_store import dropped_unless_written
from parallelsearch.stores.passages import Passage, best_first, split_contents, to_contents
from parallelsearch.stores.shard_spec import validate_store_name
from parallelsearch.stores.store_check import StoreCheck
from parallelsearch.stores.store_files import StoreDamagedError, repair_hint
from parallelsearch.stores.store_lock import StoreWriteLock

MANIFEST = "store.json"
#: the names a store this project writes gives its files
INDEX_FILE, CORPUS_FILE = "index.faiss", "corpus.jsonl"
#: passages hashed into the fingerprint, as for Chroma stores
FINGERPRINT_PASSAGES = 64
#: bytes read per block while the corpus's line starts are found
_BLOCK = 64 << 20


# the corpus, by line


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


# the store


@dataclass
class FaissFiles:
    """Where store ``name``'s files are and what its ``store.json`` records."""

    name: str
    folder: Path
    index: Path
    corpus: Path
    manifest: dict[str, Any] = field(default_factory=dict)

    def save(self) -> None:
        """Write the manifest (the files named relative to the folder when they are inside it)."""

        def named(path: Path) -> str:
            return path.name if path.parent == self.folder else str(path)

        record = {**self.manifest, "index": named(self.index), "corpus": named(self.corpus)}
        tmp = self.folder / (MANIFEST + ".tmp")
        tmp.write_text(json.dumps(record, indent=2))
        os.replace(tmp, self.folder / MANIFEST)


def _only(folder: Path, patterns: tuple[str, ...], what: str) -> Path | None:
    found = sorted({p for pattern in patterns for p in folder.glob(pattern)})
    if len(found) > 1:
        raise ValueError(
            f"FAISS store {folder}: {len(found)} {what} files ({', '.join(p.name for p in found)}); "
            f"name one in {MANIFEST}"
        )
    return found[0] if found else None


def store_names(root: Path) -> list[str]:
    """The stores under ``root``: the folders holding a manifest or an index file."""
    if not root.is_dir():
        return []
    return sorted(
        p.name
        for p in root.iterdir()
        if p.is_dir() and ((p / MANIFEST).exists() or any(p.glob("*.index")) or any(p.glob("*.faiss")))
    )


def find_files(root: Path, name: str, *, create: bool = False) -> FaissFiles:
    """Store ``name``'s files under ``root``; a missing store is an error naming the ones there,
    unless ``create`` (then the files a new store will write)."""
    folder = root / validate_store_name(name)
    if not folder.is_dir():
        if not create:
            raise missing_store_error(name, str(root), store_names(root))
        return FaissFiles(name, folder, folder / INDEX_FILE, folder / CORPUS_FILE)
    manifest = json.loads((folder / MANIFEST).read_text()) if (folder / MANIFEST).exists() else {}

    def named(key: str, patterns: tuple[str, ...], default: str) -> Path:
        if manifest.get(key):
            return (folder / manifest[key]).resolve()
        return _only(folder, patterns, key) or folder / default

    index = named("index", ("*.index", "*.faiss"), INDEX_FILE)
    return FaissFiles(name, folder, index, named("corpus", ("*.jsonl",), CORPUS_FILE), manifest)


def on_gpus(index: Any) -> Any:
    """The index copied to every GPU in fp16 and sharded over them (Search-R1's ``--faiss_gpu``),
    or the index itself when FAISS sees no GPU. Not exercised on a CPU-only machine."""
    faiss = import_faiss()
    if not hasattr(faiss, "GpuMultipleClonerOptions") or faiss.get_num_gpus() == 0:
        return index
    options = faiss.GpuMultipleClonerOptions()
    options.useFloat16 = True
    options.shard = True
    return faiss.index_cpu_to_all_gpus(index, co=options)


class FaissStore(VectorSearch):
    """A FAISS flat store (:class:`~parallelsearch.stores.passage_store.PassageStore`): exact inner-
    product search (cosine on the unit vectors the encoder writes), the passages read from the
    corpus by row. Opened for reading, the index is memory-mapped and read-only; opened for writing
    (``writable``), a new store starts empty and ``upsert`` appends, corpus line first, so an
    interrupted run leaves at most corpus lines without vectors, dropped at the next open."""

    def __init__(
        self,
        files: FaissFiles,
        embedder: Embedder,
        *,
        location: str,
        writable: bool = False,
        gpu: bool = True,
    ) -> None:
        super().__init__()
        self.name = files.name
        self.files = files
        self.embedder = embedder
        self.location = location
        self.created = not files.index.exists()
        self.writable = writable
        #: OpenMP threads of one search: 1, since a server searches several batches at once (each on
        #: its own core); with 2 threads on 2 busy cores a 20k-row scan took 50-110 ms against 11 ms
        self.search_threads = 1
        self.index = self._load(writable, gpu)
        cache = files.folder / "corpus.offsets.npy" if os.access(files.folder, os.W_OK) else None
        self.corpus = CorpusLines(files.corpus, cache)
        self._check_rows(writable)

    def _load(self, writable: bool, gpu: bool) -> Any:
        faiss = import_faiss()
        if self.created:
            if not writable:
                raise StoreDamagedError(
                    f"store {self.name} at {self.location}: its index {self.files.index} is missing. "
                    + repair_hint(self.name)
                )
            return faiss.IndexFlatIP(self.embedder.dimension)
        flags = 0 if writable else mapped_read_flags()
        try:
            index = faiss.read_index(str(self.files.index), flags)
        except RuntimeError as e:  # FAISS reports a bad file as a RuntimeError naming its reader
            raise StoreDamagedError(
                f"store {self.name}: {self.files.index} is no FAISS index ({e})"[:400]
                + f". {repair_hint(self.name)}"
            ) from e
        self._check_model(index)
        return index if writable or not gpu else on_gpus(index)

    def _check_model(self, index: Any) -> None:
        """The encoder must be the store's: same dimension, same model and family where recorded."""
        made = self.files.manifest
        model, backend = made.get("embedding_model"), made.get("encoder_backend")
        if index.d != self.embedder.dimension or (model and model != self.embedder.model_name):
            raise ModelMismatchError(
                f"store {self.name!r} at {self.location} holds {index.d}-dimensional vectors"
                + (f" of {model!r}" if model else "")
                + f", but was opened with {self.embedder.model_name!r} (dimension {self.embedder.dimension}); "
                "open it with its model (--model, PARALLELSEARCH_EMBEDDING_MODEL) and query prefix"
            )
        mine = getattr(self.embedder, "backend", "torch")
        if backend and embedding_family(backend) != embedding_family(mine):
            raise ModelMismatchError(
                f"store {self.name!r} was built with the {backend!r} encoder backend, opened with {mine!r}; "
                f"open it with encoder_backend={backend!r} ('auto' picks it)"
            )

    def _check_rows(self, writable: bool) -> None:
        """Row i of the index is line i of the corpus: the counts must agree (an interrupted append's
        extra lines are dropped when the store is opened for writing)."""
        vectors, lines = int(self.index.ntotal), len(self.corpus)
        if writable and lines > vectors:
            self.corpus.truncate(vectors)
        elif lines != vectors:
            raise StoreDamagedError(
                f"store {self.name} at {self.location}: the index {self.files.index} holds {vectors} vectors "
                f"but the corpus {self.files.corpus} {lines} lines; row i of the index must be line i of the "
                f"corpus (are they a pair?). {repair_hint(self.name)}"
            )

    def count(self) -> int:
        return int(self.index.ntotal)

    def _query_vectors(self, vecs: np.ndarray, k: int) -> list[list[Passage]]:
        n = self.count()
        if n == 0:
            return [[] for _ in vecs]
        import_faiss().omp_set_num_threads(self.search_threads)  # this thread's OpenMP team
        scores, rows = self.index.search(np.ascontiguousarray(vecs, dtype=np.float32), min(k + TIE_MARGIN, n))
        sign = -1.0 if self.index.metric_type == import_faiss().METRIC_L2 else 1.0
        return [
            best_first(
                (
                    _scored(self.corpus.passage(int(row)), sign * float(score), self.name)
                    for score, row in zip(srow, rrow, strict=True)
                    if row >= 0
                ),
                k,
            )
            for srow, rrow in zip(scores, rows, strict=True)
        ]

    @functools.cached_property
    def _ids(self) -> set[str]:
        return set(self.corpus.ids())

    def existing_ids(self, ids: Sequence[str]) -> set[str]:
        return self._ids.intersection(ids) if ids else set()

    def upsert(
        self, passages: Sequence[Passage], embeddings: Sequence[Sequence[float]] | None = None
    ) -> None:
        """Append passages the store lacks (a flat index keeps no ids to replace: an id already
        stored is refused, naming it)."""
        if not passages:
            return
        if not self.writable:  # FAISS aborts the process when a memory-mapped index is added to
            raise ValueError(
                f"store {self.name} was opened for reading (memory-mapped); add passages with index"
            )
        twice = self.existing_ids([p.id for p in passages])
        if twice:
            raise ValueError(
                f"store {self.name}: a FAISS flat store appends; {len(twice)} id(s) are stored already "
                f"(e.g. {sorted(twice)[0]!r}); index changed passages into a new store"
            )
        if embeddings is None:
            embeddings = self.embedder.encode_passages([p.text for p in passages])
        vecs = np.ascontiguousarray(embeddings, dtype=np.float32)
        self._start_files()
        self.corpus.append(passages)
        self.index.add(vecs)
        tmp = self.files.index.with_name(self.files.index.name + ".tmp")
        import_faiss().write_index(self.index, str(tmp))
        os.replace(tmp, self.files.index)
        self._ids.update(p.id for p in passages)

    def _start_files(self) -> None:
        """A new store's folder and manifest (model, dimension, backend), before its first line."""
        if (self.files.folder / MANIFEST).exists():
            return
        self.files.folder.mkdir(parents=True, exist_ok=True)
        self.files.manifest.update(
            embedding_model=self.embedder.model_name,
            dimension=self.embedder.dimension,
            encoder_backend=getattr(self.embedder, "backend", "torch"),
        )
        self.files.save()

    def recorded_budget(self) -> int | None:
        value = self.files.manifest.get("max_passage_tokens")
        return int(value) if isinstance(value, int) else None

    def record_budget(self, budget: int) -> None:
        self._start_files()
        self.files.manifest["max_passage_tokens"] = budget
        self.files.save()

    def info(self) -> dict[str, Any]:
        made = self.files.manifest
        return {
            "name": self.name,
            "count": self.count(),
            "kind": "faiss",
            "model": made.get("embedding_model", self.embedder.model_name),
            "encoder_backend": made.get("encoder_backend", getattr(self.embedder, "backend", "torch")),
            "dimension": int(self.index.d),
            "index": str(self.files.index),
            "corpus": str(self.files.corpus),
            "location": self.location,
        }

    def fingerprint(self) -> str:
        """The count and the first passages' ids and texts, as :meth:`ChromaStore.fingerprint` hashes them."""
        first = self.corpus.passages(range(min(FINGERPRINT_PASSAGES, self.count())))
        return corpus_fingerprint(self.count(), [p.id for p in first], [p.text for p in first])

    def verify(self, batch_size: int = 4096, progress: bool = False) -> StoreCheck:
        """Every vector read back (finite, of the index's dimension) and every corpus line parsed."""
        from tqdm.auto import tqdm

        check = StoreCheck(store=self.name, count=self.count(), checksums_apply=False)
        with tqdm(total=check.count, desc=f"checking {self.name}", disable=not progress) as bar:
            for start in range(0, check.count, batch_size):
                rows = range(start, min(start + batch_size, check.count))
                _check_rows(self, rows, check)
                bar.update(len(rows))
        return check

    def drop(self) -> None:
        """Remove the files a store this object created wrote (a first ``index`` that failed)."""
        self.corpus.close()
        for path in (self.files.index, self.files.corpus, self.files.folder / MANIFEST):
            path.unlink(missing_ok=True)
        for extra in self.files.folder.glob("corpus.offsets.*"):
            extra.unlink()
        with contextlib.suppress(OSError):
            self.files.folder.rmdir()

    def close(self) -> None:
        self.corpus.close()


def _scored(p: Passage, score: float, store: str) -> Passage:
    return Passage(p.id, p.title, p.text, score, store)


def _check_rows(store: FaissStore, rows: range, check: StoreCheck) -> None:
    """One batch of :meth:`FaissStore.verify`: the vectors of ``rows`` and their corpus lines."""
    vecs = store.index.reconstruct_n(rows.start, len(rows))
    finite = np.isfinite(vecs).all(axis=1)
    for offset, row in enumerate(rows):
        try:
            pid = store.corpus.passage(row).id
        except ValueError as e:
            check.unreadable.append(f"row {row}")
            check.first_error = check.first_error or str(e)
            continue
        if not finite[offset]:
            check.unreadable.append(pid)
            check.first_error = check.first_error or f"row {row} ({pid}): the vector is not finite"
    check.checked += len(rows)


# the kind, as configuration opens it


def _embedder(cfg: RetrievalConfig, manifest: dict[str, Any], name: str) -> Embedder:
    recorded = manifest.get("encoder_backend") if cfg.encoder_backend == "auto" else None
    try:
        return make_embedder(cfg, recorded=recorded)
    except ValueError as e:
        raise ValueError(f"store {name!r} at {cfg.kind_location()}: {e}") from e


def open_faiss_store(cfg: RetrievalConfig, name: str, *, embedder: Embedder | None = None) -> FaissStore:
    """Store ``name`` for reading: memory-mapped, on the GPUs when FAISS has some."""
    files = find_files(cfg.kind_folder(), name)
    return FaissStore(files, embedder or _embedder(cfg, files.manifest, name), location=cfg.kind_location())


@contextlib.contextmanager
def writing_faiss_store(cfg: RetrievalConfig, name: str, **options: Any) -> Iterator[FaissStore]:
    """Store ``name`` opened (created when missing) for writing under the store's writer lock; a
    store this call created is removed again when the block fails before adding anything.
    ``options``: ``graphs.factory.writing_store``'s keywords (``lock_timeout_s``, ``on_wait``,
    ``embedder``, ``embedder_for``; ``hnsw`` is Chroma's and refused)."""
    if options.get("hnsw"):
        raise ValueError("HNSW parameters (--hnsw-*, --space) are Chroma's; a FAISS flat store has none")
    root = cfg.kind_folder()
    lock_timeout_s = options.get("lock_timeout_s")
    timeout = cfg.store_lock_timeout_s if lock_timeout_s is None else lock_timeout_s
    embedder: Embedder | None = options.get("embedder")
    embedder_for: Callable[[str | None], Embedder] | None = options.get("embedder_for")
    with StoreWriteLock(root, name, timeout_s=timeout, on_wait=options.get("on_wait")):
        files = find_files(root, name, create=True)
        if embedder is None:
            recorded = files.manifest.get("encoder_backend") if cfg.encoder_backend == "auto" else None
            embedder = embedder_for(recorded) if embedder_for else _embedder(cfg, files.manifest, name)
        store = FaissStore(files, embedder, location=cfg.kind_location(), writable=True)
        try:
            with dropped_unless_written(store):
                yield store
        finally:
            store.close()


def describe_faiss_stores(cfg: RetrievalConfig, *, timeout_s: float = 0.0) -> list[dict[str, Any]]:
    """Name, count, model and files of every FAISS store in the kind's folder (read in this process:
    FAISS refuses a damaged file with an error; a store that does not open is listed with it)."""
    rows = []
    for name in store_names(cfg.kind_folder()) if cfg.has_kind_folder() else []:
        try:
            store = open_faiss_store(cfg, name)
        except (ParallelSearchError, ValueError, OSError) as e:
            rows.append({"name": name, "count": -1, "error": str(e)[:400], "location": cfg.kind_location()})
            continue
        rows.append(store.info())
        store.close()
    return rows


def check_faiss_store(
    cfg: RetrievalConfig, name: str, *, timeout_s: float = 0.0, progress: bool = False
) -> StoreCheck:
    """Every vector and corpus line of store ``name`` read back; a store that does not open is the finding."""
    try:
        store = open_faiss_store(cfg, name)
    except (ParallelSearchError, OSError) as e:
        if isinstance(e, LookupError):
            raise
        return StoreCheck(store=name, count=-1, first_error=str(e)[:400])
    try:
        return store.verify(progress=progress)
    finally:
        store.close()
