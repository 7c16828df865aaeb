"""Chroma-backed passage stores: one collection per named store.

Embedded (``PersistentClient``) by default; ``HttpClient`` when several processes (OpenRLHF's
Ray actors) must share a store, since an embedded one is not multi-process safe. Embeddings
are computed here and passed explicitly, so Chroma's own (downloading) embedding function
never runs; the collection's metadata records model, dimension and encoder backend. HNSW
parameters are fixed at creation, except ``ef_search`` (processes opening the store later see it).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Literal, get_args

import numpy as np

from parallelsearch.stores.coalesced_search import VectorSearch
from parallelsearch.stores.encoding.backend import embedding_family
from parallelsearch.stores.encoding.embedder import Embedder, get_embedder
from parallelsearch.stores.errors import ModelMismatchError, StoreNotFoundError, missing_store_error
from parallelsearch.stores.passages import Passage, best_first
from parallelsearch.stores.shard_spec import validate_store_name
from parallelsearch.stores.store_check import CHECKSUMS_ABSENT, StoreCheck
from parallelsearch.stores.store_files import repair_hint
from parallelsearch.stores.vector_checksum import CHECKSUM_KEY, mismatched, rot_message, vector_checksums

log = logging.getLogger(__name__)

#: passages hashed into a store's fingerprint (with its count)
FINGERPRINT_PASSAGES = 64
#: vectors the open check reads back and compares with their checksums
PROBE_VECTORS = 32
_META_MODEL = "ps_embedding_model"
META_DIM = "ps_dimension"
#: collection metadata: the ``--max-passage-tokens`` the store's passages were split with (0: none)
BUDGET_KEY = "ps_max_passage_tokens"
_META_BACKEND = "ps_encoder_backend"  # absent in stores built before it existed: torch


def corpus_fingerprint(count: int, ids: Sequence[str], texts: Sequence[str | None]) -> str:
    """``sha256:`` and 16 hex digits of the count, ids and texts (see :meth:`ChromaStore.fingerprint`)."""
    import hashlib

    h = hashlib.sha256(str(count).encode())
    for pid, text in zip(ids, texts, strict=False):
        h.update(
            b"\0" + str(pid).encode("utf-8", "replace") + b"\0" + (text or "").encode("utf-8", "replace")
        )
    return "sha256:" + h.hexdigest()[:16]


def store_backend(client: Any, name: str) -> str | None:
    """The encoder backend the store ``name`` was built with (None when there is no such store)."""
    if name not in collection_names(client):
        return None
    meta = client.get_collection(name, embedding_function=None).metadata or {}
    return str(meta.get(_META_BACKEND, "torch"))


def collection_names(client: Any) -> list[str]:
    """The collections behind ``client`` (a client lists names or collection objects)."""
    return [c.name if hasattr(c, "name") else c for c in client.list_collections()]


def require_stores(client: Any, names: Sequence[str], location: str) -> None:
    """Fail on the first of ``names`` that is not a store, before anything loads an encoder for it."""
    existing = collection_names(client)
    for name in names:
        if name not in existing:
            raise missing_store_error(name, location, existing)


#: extra hits asked of an exhaustively searched store beyond k, so passages tied at the k-th place
#: are ranked by id
TIE_MARGIN = 4

HnswKey = Literal["space", "ef_construction", "max_neighbors", "ef_search"]
HNSW_KEYS: tuple[str, ...] = get_args(HnswKey)
MUTABLE_KEYS = ("ef_search",)
#: cosine and inner product give ``score = 1 - distance`` that the searchers report; l2 does not
Space = Literal["cosine", "ip"]
SPACES: tuple[str, ...] = get_args(Space)


def hnsw_configuration(params: dict[str, Any] | None) -> dict[str, Any]:
    """The ``hnsw`` part of a new collection's configuration; a bad value is a ValueError naming it."""
    out: dict[str, Any] = {"space": "cosine"}
    for key, value in (params or {}).items():
        if value is None:
            continue
        if key not in HNSW_KEYS:
            raise ValueError(f"unknown HNSW parameter {key!r}; known: {', '.join(HNSW_KEYS)}")
        if key == "space":
            if value not in SPACES:
                raise ValueError(f"HNSW space {value!r} is not supported; use one of {', '.join(SPACES)}")
        elif not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"HNSW {key} must be a positive integer, got {value!r}")
        elif key == "max_neighbors" and value < 2:
            raise ValueError(f"HNSW max_neighbors must be >= 2, got {value}")
        out[key] = value
    return out


def hnsw_of(collection: Any) -> dict[str, Any]:
    """The HNSW parameters Chroma recorded for ``collection`` (empty when it keeps none)."""
    try:
        conf = collection.configuration or {}
    except Exception:  # pragma: no cover - older servers without configuration
        return {}
    hnsw = conf.get("hnsw") or {}
    return {k: hnsw[k] for k in HNSW_KEYS if k in hnsw}


def reconcile(collection: Any, requested: dict[str, Any] | None, where: str) -> dict[str, Any]:
    """Change ``ef_search`` if ``requested`` differs; any other differing parameter is an error (the
    store would silently keep its own). Returns the parameters changed."""
    wanted = {k: v for k, v in (requested or {}).items() if v is not None}
    if not wanted:
        return {}
    hnsw_configuration(wanted)  # validate
    have = hnsw_of(collection)
    fixed = {k: v for k, v in wanted.items() if k not in MUTABLE_KEYS and have.get(k) != v}
    if fixed:
        said = ", ".join(f"{k}={v} (store has {have.get(k)})" for k, v in fixed.items())
        raise ValueError(
            f"store {collection.name!r} at {where} was created with other HNSW parameters: {said}; "
            "only ef_search can change after creation (re-index into a new store for the others)"
        )
    changed = {k: v for k, v in wanted.items() if k in MUTABLE_KEYS and have.get(k) != v}
    if changed:
        set_ef_search(collection, changed["ef_search"])
    return changed


def set_ef_search(collection: Any, ef_search: int) -> None:
    """Record a new ``ef_search``; processes that open the store from now on search with it."""
    hnsw_configuration({"ef_search": ef_search})
    collection.modify(configuration={"hnsw": {"ef_search": ef_search}})


def _no_telemetry() -> Any:
    from chromadb.config import Settings as ChromaSettings

    return ChromaSettings(anonymized_telemetry=False, allow_reset=False)


def make_client(
    path: str | Path | None = None, host: str | None = None, port: int = 8000, *, create: bool = True
) -> Any:
    """An embedded client at ``path`` (a missing folder is created, unless not ``create``: reading
    creates nothing) or an HTTP client to ``host:port``."""
    import chromadb

    if host:
        return chromadb.HttpClient(host=host, port=int(port), settings=_no_telemetry())
    if path is None:
        raise ValueError("either a path (embedded store) or a host (Chroma server) is needed")
    if create:
        Path(path).mkdir(parents=True, exist_ok=True)
    elif not (Path(path) / "chroma.sqlite3").is_file():
        raise StoreNotFoundError(f"no stores at {path} yet (create one with index)")
    return chromadb.PersistentClient(path=str(path), settings=_no_telemetry())


def is_chroma_error(e: BaseException) -> bool:
    """Whether ``e`` is Chroma's own error (or SQLite's, under it): a store it cannot read."""
    import sqlite3

    return type(e).__module__.startswith("chromadb") or isinstance(e, sqlite3.DatabaseError)


class ChromaStore(VectorSearch):
    """A named passage store. Thread-safe reads; async single queries are coalesced."""

    def __init__(
        self,
        name: str,
        *,
        client: Any | None = None,
        path: str | Path | None = None,
        host: str | None = None,
        port: int = 8000,
        embedder: Embedder | None = None,
        create: bool = True,
        location: str | None = None,
        hnsw: dict[str, Any] | None = None,
    ) -> None:
        super().__init__()
        self.name = validate_store_name(name)
        self._requested_hnsw = hnsw
        self._hnsw = hnsw_configuration(hnsw)
        self.client = client if client is not None else make_client(path, host, port)
        self.location = location or (f"http://{host}:{port}" if host else str(path) if path else "client")
        self.embedder = embedder or get_embedder()
        self.created = False  # True when this object created the collection
        #: what the open check found of the vector checksums (None: not checked)
        self.checksums: str | None = None
        self.collection = self._open(create)
        #: the store keeps unit vectors (cosine): checksums are of the normalised vector
        self.normalizes = (hnsw_of(self.collection).get("space") or self._hnsw["space"]) == "cosine"

    def _open(self, create: bool) -> Any:
        backend = getattr(self.embedder, "backend", "torch")
        meta = {
            _META_MODEL: self.embedder.model_name,
            META_DIM: self.embedder.dimension,
            _META_BACKEND: backend,
        }
        existing = collection_names(self.client)
        if self.name not in existing:
            if not create:
                raise missing_store_error(self.name, self.location, existing)
            try:
                col = self.client.create_collection(
                    self.name,
                    metadata=meta,
                    configuration={"hnsw": self._hnsw},
                    embedding_function=None,
                )
                self.created = True
                return col
            except Exception as e:  # noqa: BLE001 - Chroma's error class differs by client and version
                # another process created it between the listing and here: open theirs
                if "already exists" not in str(e):
                    raise
        col = self.client.get_collection(self.name, embedding_function=None)
        have = col.metadata or {}
        if have.get(_META_MODEL) != meta[_META_MODEL] or have.get(META_DIM) != meta[META_DIM]:
            raise ModelMismatchError(
                f"store {self.name!r} at {self.location} was built with embedding model "
                f"{have.get(_META_MODEL)!r} (dimension {have.get(META_DIM)}), but was opened with "
                f"{meta[_META_MODEL]!r} (dimension {meta[META_DIM]}); open it with the same model or re-index"
            )
        reconcile(col, self._requested_hnsw, self.location)
        built = str(have.get(_META_BACKEND, "torch"))
        if embedding_family(built) != embedding_family(backend):
            raise ModelMismatchError(
                f"store {self.name!r} at {self.location} was built with the {built!r} encoder backend, but was "
                f"opened with {backend!r}; their embeddings differ. Open it with encoder_backend={built!r} "
                "(--encoder-backend, PARALLELSEARCH_ENCODER_BACKEND; 'auto' picks it) or re-index"
            )
        return col

    def probe(self, sample_ids: Sequence[str] | None = None) -> None:
        """Chroma reads the store once, as a search does: a search returning texts and titles (it
        loads the index and the metadata), so a store Chroma cannot read fails when it is opened,
        naming it, not at the first question. Then :meth:`check_sample`."""
        from parallelsearch.stores.store_files import StoreDamagedError

        vector = np.zeros((1, self.embedder.dimension), dtype=np.float32)
        vector[0, 0] = 1.0
        try:
            self.collection.query(query_embeddings=vector, n_results=1, include=["documents", "metadatas"])
        except Exception as e:  # noqa: BLE001 - any failure to search is the finding
            if not is_chroma_error(e):
                raise
            raise StoreDamagedError(
                f"store {self.name} at {self.location} cannot be searched ({type(e).__name__}: {e})"[:500]
                + f". {repair_hint(self.name)}"
            ) from e
        self.check_sample(sample_ids)

    def check_sample(self, sample_ids: Sequence[str] | None = None) -> None:
        """``sample_ids``' vectors (else the first passages') read back and compared with their
        checksums: a vector that differs is :class:`StoreDamagedError` naming the ids and the repair.
        A sample Chroma cannot read back is a warning (``stores --check`` reads every vector)."""
        from parallelsearch.stores.store_files import StoreDamagedError

        ids = list(sample_ids or [])[:PROBE_VECTORS]
        try:
            got = self.collection.get(
                **({"ids": ids} if ids else {"limit": PROBE_VECTORS}), include=["embeddings", "metadatas"]
            )
        except Exception as e:  # noqa: BLE001 - Chroma's error classes differ by client and version
            if not is_chroma_error(e):
                raise
            self.checksums = f"not compared ({type(e).__name__}: {e})"[:300]
            log.warning(
                "store %s: sampled vectors could not be read back (%s); run stores --check", self.name, e
            )
            return
        vecs, n = got.get("embeddings"), len(got["ids"])
        bad, compared = mismatched(
            got["ids"], vecs if vecs is not None else [None] * n, got["metadatas"] or [None] * n
        )
        if bad:
            raise StoreDamagedError(
                f"store {self.name} at {self.location} is damaged, so it is not opened: "
                f"{rot_message(self.name, bad, n)}. {repair_hint(self.name)}"
            )
        self.checksums = f"{compared} sampled vectors match their checksums" if compared else "absent"
        if n and not compared:
            log.warning("store %s records no vector checksums (%s)", self.name, CHECKSUMS_ABSENT)

    def count(self) -> int:
        return int(self.collection.count())

    @functools.cached_property
    def tie_margin(self) -> int:
        """Hits asked beyond k so that ties at the k-th place are settled by id: only where a query
        walks the whole HNSW graph (``ef_search`` above the passage count), whose top-k is then a
        brute-force search's. Elsewhere the index decides the k-th place anyway, and each extra
        hit's document and metadata cost ``/retrieve`` throughput (docs/performance.md). Read at the first
        search, not at the open: opening a store reads nothing a damaged index could hang."""
        ef = hnsw_of(self.collection).get("ef_search")
        return TIE_MARGIN if ef is not None and ef > self.count() else 0

    def existing_ids(self, ids: Sequence[str]) -> set[str]:
        if not ids:
            return set()
        got = self.collection.get(ids=list(ids), include=[])
        return set(got["ids"])

    def upsert(
        self, passages: Sequence[Passage], embeddings: Sequence[Sequence[float]] | None = None
    ) -> None:
        """Insert or replace passages by id (idempotent)."""
        if not passages:
            return
        if embeddings is None:
            embeddings = self.embedder.encode_passages([p.text for p in passages])
        embeddings = np.asarray(embeddings, dtype=np.float32)
        self.collection.upsert(
            ids=[p.id for p in passages],
            embeddings=embeddings,
            documents=[p.text for p in passages],
            metadatas=[
                {"title": p.title, CHECKSUM_KEY: c}
                for p, c in zip(
                    passages, vector_checksums(embeddings, normalize=self.normalizes), strict=True
                )
            ],
        )

    def recorded_budget(self) -> int | None:
        """The passage token budget the collection's metadata records (``passage_budget.py``)."""
        value = (self.collection.metadata or {}).get(BUDGET_KEY)
        return int(value) if isinstance(value, int) else None

    def record_budget(self, budget: int) -> None:
        self.collection.modify(metadata={**(self.collection.metadata or {}), BUDGET_KEY: budget})

    def drop(self) -> None:
        """Delete the whole store (used to remove a store a failed first ``index`` created)."""
        self.client.delete_collection(self.name)

    def verify(self, batch_size: int = 512, progress: bool = False) -> StoreCheck:
        """:func:`verify_collection` in this process (``isolated_read.check_store`` runs it in a child,
        since a damaged segment can crash or hang Chroma's reader)."""
        from tqdm.auto import tqdm

        with tqdm(desc=f"checking {self.name}", disable=not progress) as bar:

            def advance(checked: int, count: int) -> None:
                bar.total = count
                bar.update(checked - bar.n)

            return verify_collection(
                self.collection, self.name, self.embedder.dimension, batch_size, on_progress=advance
            )

    def _query_vectors(self, vecs: np.ndarray, k: int) -> list[list[Passage]]:
        # Chroma returns fewer rows when the store holds fewer passages: no count() needed; equal
        # scores are ranked by id (best_first), at the k-th place too where tie_margin asks for more
        res = self.collection.query(
            query_embeddings=vecs,
            n_results=k + self.tie_margin,
            include=["documents", "metadatas", "distances"],
        )
        return [
            best_first(
                (
                    Passage(i, (m or {}).get("title", ""), d or "", 1.0 - float(dist), self.name)
                    for i, d, m, dist in zip(ids, docs, metas, dists, strict=True)
                ),
                k,
            )
            for ids, docs, metas, dists in zip(
                res["ids"], res["documents"], res["metadatas"], res["distances"], strict=True
            )
        ]

    def info(self) -> dict[str, Any]:
        return {**_describe(self.collection, self.name), "location": self.location}

    def fingerprint(self) -> str:
        """The corpus's fingerprint: a hash of the passage count and the first
        :data:`FINGERPRINT_PASSAGES` passages (ids and text) in the store's order. Cheap at any size;
        it tells two corpora apart, it does not prove two stores equal passage by passage."""
        got = self.collection.get(limit=FINGERPRINT_PASSAGES, include=["documents"])
        return corpus_fingerprint(self.count(), got["ids"], got["documents"] or [])


class _StoredTwice:
    """Passages stored twice: one title, and a text that is another's or begins it (the pieces of
    a passage an earlier run split differently start alike). Candidates share their title and
    first 64 characters; they are confirmed on their whole text at the end."""

    def __init__(self) -> None:
        self.first: dict[int, str] = {}
        self.groups: dict[int, list[str]] = {}

    def add(self, ids: list[str], documents: list[Any], metadatas: list[Any]) -> None:
        for pid, doc, meta in zip(ids, documents, metadatas, strict=True):
            key = hash(((meta or {}).get("title", ""), (doc or "")[:64]))
            if key in self.first:
                self.groups.setdefault(key, [self.first[key]]).append(pid)
            else:
                self.first[key] = pid

    def confirmed(self, collection: Any) -> list[list[str]]:
        out = []
        for ids in self.groups.values():
            got = collection.get(ids=ids, include=["documents", "metadatas"])
            texts = {
                i: ((m or {}).get("title", ""), d or "")
                for i, d, m in zip(got["ids"], got["documents"], got["metadatas"], strict=True)
            }
            ordered = sorted(texts, key=lambda i: (len(texts[i][1]), i))
            twice = [
                i
                for j, i in enumerate(ordered)
                if any(
                    texts[i][0] == texts[k][0] and texts[i][1].startswith(texts[k][1]) for k in ordered[:j]
                )
            ]
            if twice:
                out.append([ordered[0], *twice])
        return out


def verify_collection(
    collection: Any,
    name: str,
    dimension: int | None,
    batch_size: int = 512,
    on_progress: Callable[[int, int], None] | None = None,
) -> StoreCheck:
    """Read every vector of ``collection`` back; ids whose vector is missing or unreadable are corruption.

    A store written by two processes at once keeps its documents but loses vectors (``InternalError:
    Error getting embedding``); a failing batch is halved until the bad ids are named. Passages
    stored twice are named too (``duplicates``; not corruption: search still works).
    """
    try:
        check = StoreCheck(store=name, count=int(collection.count()))
    except Exception as e:  # noqa: BLE001 - a store too broken to count is the worst finding
        return StoreCheck(store=name, count=-1, first_error=f"{type(e).__name__}: {e}"[:300])
    offset = 0
    twice = _StoredTwice()
    while True:
        try:
            got = collection.get(include=["documents", "metadatas"], limit=batch_size, offset=offset)
        except Exception as e:  # noqa: BLE001
            check.first_error = check.first_error or f"{type(e).__name__}: {e}"[:300]
            check.checked = -1  # listing failed: not ok, whatever was read so far
            break
        ids = got["ids"]
        if not ids:
            break
        offset += len(ids)
        twice.add(ids, got["documents"], got["metadatas"])
        _check_ids(collection, dimension, ids, check)
        if on_progress is not None:
            on_progress(check.checked, check.count)
    if check.checked >= 0:
        check.duplicates = twice.confirmed(collection)
    return check


def _check_ids(collection: Any, dimension: int | None, ids: list[str], check: StoreCheck) -> None:
    try:
        got = collection.get(ids=ids, include=["embeddings", "metadatas"])
    except Exception as e:  # noqa: BLE001 - any read failure is what we are looking for
        if len(ids) == 1:
            check.unreadable.append(ids[0])
            check.first_error = check.first_error or f"{type(e).__name__}: {e}"[:300]
            check.checked += 1
            return
        mid = len(ids) // 2
        _check_ids(collection, dimension, ids[:mid], check)
        _check_ids(collection, dimension, ids[mid:], check)
        return
    vecs = got.get("embeddings")
    vecs = vecs if vecs is not None else [None] * len(got["ids"])
    by_id = dict(zip(got["ids"], vecs, strict=True))
    for i in ids:
        v = by_id.get(i)
        check.checked += 1
        if v is None or (dimension and len(v) != dimension) or not np.all(np.isfinite(v)):
            check.missing.append(i)
    ok = [
        (i, v, m)
        for i, v, m in zip(got["ids"], vecs, got["metadatas"] or [], strict=False)
        if i not in check.missing
    ]
    rotted, compared = mismatched([o[0] for o in ok], [o[1] for o in ok], [o[2] for o in ok])
    check.rotted.extend(rotted)
    check.checksummed += compared


def describe_collection(client: Any, name: str) -> dict[str, Any]:
    """Name, count and model of the collection ``name`` (no embedder needed)."""
    return _describe(client.get_collection(name, embedding_function=None), name)


def _describe(col: Any, name: str) -> dict[str, Any]:
    meta = col.metadata or {}
    return {
        "name": name,
        "count": col.count(),
        "model": meta.get(_META_MODEL),
        "dimension": meta.get(META_DIM),
        "hnsw": hnsw_of(col),
        "encoder_backend": meta.get(_META_BACKEND, "torch"),
    }


def describe_collections(client: Any) -> list[dict[str, Any]]:
    """:func:`describe_collection` of every collection behind ``client``, in this process."""
    return [describe_collection(client, name) for name in collection_names(client)]
