"""One corpus split over several Chroma collections (shards), searched as one store.

Pieces of one corpus are merged by distance, not by rank (rank fusion would put shard 2's 1st
passage above shard 1's 2nd even when it is far worse): each query is embedded once, sent to
every shard at once under one deadline, and the union cut to the k nearest, ties by id. The
shards must agree on model, dimension, encoder family and distance space; a shard that
disagrees, is missing or fails is a :class:`ShardError` naming it, unless ``allow_partial``
lets the others answer (:class:`ShardHits` says which are missing).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from pathlib import Path
from typing import Any

import numpy as np

from parallelsearch.stores.chroma_store import ChromaStore, hnsw_of, make_client
from parallelsearch.stores.coalesced_search import VectorSearch
from parallelsearch.stores.encoding.backend import embedding_family
from parallelsearch.stores.encoding.embedder import Embedder
from parallelsearch.stores.errors import ModelMismatchError, ParallelSearchError, StoreNotFoundError
from parallelsearch.stores.passages import Passage, best_first
from parallelsearch.stores.shard_spec import ShardSpec, StoreSpec
from parallelsearch.stores.store_files import require_sound_store

log = logging.getLogger(__name__)


class ShardError(ParallelSearchError, RuntimeError):
    """A shard of a sharded store is missing, disagrees with the others, or failed a query."""

    http_status = 502


class ShardHits(list):
    """The passages of one query (a ``list[Passage]``) and the shards that did not answer it
    (``missing``: shard label -> error; empty unless ``allow_partial``). A slice keeps ``missing``."""

    def __init__(self, passages: Sequence[Passage] = (), missing: dict[str, str] | None = None):
        super().__init__(passages)
        self.missing: dict[str, str] = dict(missing or {})

    def __getitem__(self, i: Any) -> Any:
        got = super().__getitem__(i)
        return ShardHits(got, self.missing) if isinstance(i, slice) else got

    @property
    def note(self) -> str | None:
        """What a trace shows for a partial answer (None when every shard answered)."""
        if not self.missing:
            return None
        said = "; ".join(f"{label}: {err}" for label, err in sorted(self.missing.items()))
        return f"partial: {len(self.missing)} shard(s) did not answer ({said})"


def merge_by_distance(per_shard: Sequence[Sequence[Passage]], k: int, store: str) -> list[Passage]:
    """The ``k`` best passages of all shards by score (1 - distance), ties by id; an id found in
    two shards counts once, with its best score."""
    best: dict[str, Passage] = {}
    for hits in per_shard:
        for p in hits:
            have = best.get(p.id)
            if have is None or (p.score or 0.0) > (have.score or 0.0):
                best[p.id] = p
    return [Passage(p.id, p.title, p.text, p.score, store) for p in best_first(best.values(), k)]


def _set_http_timeout(client: Any, timeout_s: float) -> None:
    """Give a Chroma HTTP client's httpx session a timeout (it has none), so a hung server frees the
    calling thread."""
    session = getattr(getattr(client, "_server", None), "_session", None)
    if session is not None and hasattr(session, "timeout"):
        import httpx

        session.timeout = httpx.Timeout(timeout_s)


def open_shards(
    spec: StoreSpec,
    embedder_for: Callable[[Any, str], Embedder],
    *,
    host: str | None = None,
    port: int = 8000,
    path: str | Path | None = None,
    timeout_s: float = 10.0,
) -> list[tuple[str, ChromaStore]]:
    """Open every shard of ``spec`` as (label, store), all with the encoder ``embedder_for(client,
    collection)`` gives for the first shard; a shard with no location of its own lives at
    ``host:port`` or ``path``. Shards on one server share its client."""
    clients: dict[tuple[Any, ...], Any] = {}
    embedder: Embedder | None = None
    out = []
    for shard in spec.shards:
        where = _where(shard, host, port, path)
        label = shard.label if (shard.host or shard.path is not None) else f"{shard.collection}@{where[1]}"
        sample: list[str] | None = None
        try:
            if where[0] is None:  # reading must not create a folder, nor open files that do not add up
                if not Path(where[1]).is_dir():
                    raise StoreNotFoundError(f"no Chroma folder {where[1]}")
                sample = require_sound_store(where[1], shard.collection).sample_ids
            if where not in clients:
                clients[where] = _within(
                    timeout_s,
                    lambda w=where: (
                        make_client(host=w[0], port=w[2]) if w[0] else make_client(path=w[1], create=False)
                    ),
                )
                _set_http_timeout(clients[where], timeout_s)
            if embedder is None:
                embedder = embedder_for(clients[where], shard.collection)
            store = _within(
                timeout_s,
                lambda c=clients[where], e=embedder, col=shard.collection, w=where, ids=sample: _probed(
                    ChromaStore(col, client=c, embedder=e, create=False, location=str(w[1])), ids
                ),
            )
        except (ModelMismatchError, StoreNotFoundError) as e:
            raise ShardError(f"shard {label} of store {spec.name!r}: {e}") from e
        except Exception as e:  # noqa: BLE001 - an unreachable server differs by client and version
            raise ShardError(
                f"shard {label} of store {spec.name!r} cannot be opened: {type(e).__name__}: {e}"[:500]
            ) from e
        out.append((label, store))
    check_agreement(spec.name, out)
    return out


def _probed(store: ChromaStore, sample_ids: list[str] | None) -> ChromaStore:
    """``store`` once Chroma has read it as a search does (:meth:`ChromaStore.probe`)."""
    store.probe(sample_ids)
    return store


def _within(timeout_s: float, fn: Callable[[], Any]) -> Any:
    """``fn()`` on a daemon thread, or a TimeoutError after ``timeout_s``: making Chroma's HTTP client
    asks the server with no timeout, so a hung server would hang the caller."""
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = fn()
        except BaseException as e:  # noqa: BLE001 - handed to the caller below
            box["error"] = e

    thread = threading.Thread(target=run, daemon=True, name="open-shard")
    thread.start()
    thread.join(timeout_s)
    if thread.is_alive():
        raise TimeoutError(f"no answer within {timeout_s:g} s")
    if "error" in box:
        raise box["error"]
    return box["value"]


def _where(shard: ShardSpec, host: str | None, port: int, path: str | Path | None) -> tuple[Any, ...]:
    """(host or None, location text, port) of a shard."""
    if shard.host or shard.path is not None:
        host, port, path = shard.host, shard.port or 8000, shard.path
    if host:
        return (host, f"http://{host}:{port}", port)
    if path is None:
        raise ShardError(f"shard {shard.collection} has no location and none is configured (chroma_path)")
    return (None, str(path), 0)


def check_agreement(name: str, shards: Sequence[tuple[str, ChromaStore]]) -> None:
    """Every shard records the first one's model, dimension, encoder family and distance space."""

    def facts(store: ChromaStore) -> dict[str, Any]:
        info = store.collection.metadata or {}
        return {
            "embedding model": info.get("ps_embedding_model"),
            "dimension": info.get("ps_dimension"),
            "encoder family": embedding_family(str(info.get("ps_encoder_backend", "torch"))),
            "distance space": hnsw_of(store.collection).get("space", "cosine"),
        }

    first_label, first = shards[0]
    want = facts(first)
    for label, store in shards[1:]:
        have = facts(store)
        for key, value in want.items():
            if have[key] != value:
                raise ShardError(
                    f"shard {label} of store {name!r} has {key} {have[key]!r}, but shard {first_label} has "
                    f"{value!r}; every shard of one store must be built the same way (re-index {label})"
                )


class ShardedStore(VectorSearch):
    """A store name standing for several shards; reads like a :class:`ChromaStore`, so searchers and
    ``/retrieve`` take it. A failing shard query is retried ``retries`` times, ``backoff_s`` x attempt
    apart, within the deadline; up to ``MAX_BATCHES`` batches query the shards at once."""

    retries = 1
    backoff_s = 0.05
    MAX_BATCHES = 8

    def __init__(
        self,
        name: str,
        shards: Sequence[tuple[str, ChromaStore]],
        embedder: Embedder,
        *,
        allow_partial: bool = False,
        timeout_s: float = 10.0,
    ) -> None:
        super().__init__()
        if not shards:
            raise ValueError(f"sharded store {name!r} needs at least one shard")
        self.name = name
        self.shards = list(shards)
        self.embedder = embedder
        self.allow_partial = allow_partial
        self.timeout_s = timeout_s
        self._pool = ThreadPoolExecutor(
            max_workers=len(self.shards) * self.MAX_BATCHES, thread_name_prefix=f"shards-{name}"
        )

    @property
    def location(self) -> str:
        return ", ".join(label for label, _ in self.shards)

    def _query_vectors(self, vecs: np.ndarray, k: int) -> list[list[Passage]]:
        deadline = time.monotonic() + self.timeout_s
        futures: list[tuple[str, Future]] = [
            (label, self._pool.submit(self._query_shard, store, vecs, k, deadline))
            for label, store in self.shards
        ]
        answers: list[list[list[Passage]]] = []
        failed: dict[str, str] = {}
        for label, fut in futures:
            try:
                answers.append(fut.result(timeout=max(0.0, deadline - time.monotonic())))
            except FutureTimeout:
                fut.cancel()
                failed[label] = f"timed out after {self.timeout_s:g} s"
            except Exception as e:  # noqa: BLE001 - any shard failure is reported with the shard named
                failed[label] = f"{type(e).__name__}: {e}"[:300]
        if failed and (not self.allow_partial or not answers):
            said = "; ".join(f"shard {label}: {err}" for label, err in failed.items())
            raise ShardError(
                f"store {self.name!r}: {len(failed)} of {len(self.shards)} shard(s) failed ({said})"
                + ("" if self.allow_partial else "; set allow_partial to answer from the others")
            )
        if failed:
            log.warning(
                "store %r answered from %d of %d shards: %s",
                self.name,
                len(answers),
                len(self.shards),
                failed,
            )
        return [
            ShardHits(merge_by_distance([a[qi] for a in answers], k, self.name), failed)
            for qi in range(len(vecs))
        ]

    def _query_shard(
        self, store: ChromaStore, vecs: np.ndarray, k: int, deadline: float
    ) -> list[list[Passage]]:
        for attempt in range(self.retries + 1):
            try:
                return store.search_vectors(vecs, k)
            except Exception:
                wait = self.backoff_s * (attempt + 1)
                if attempt == self.retries or time.monotonic() + wait >= deadline:
                    raise
                time.sleep(wait)
        raise AssertionError("unreachable")  # pragma: no cover

    def count(self) -> int:
        return sum(store.count() for _, store in self.shards)

    def fingerprint(self) -> str:
        """A hash of the shards' fingerprints, in their declared order."""
        import hashlib

        parts = "\0".join(f"{label}={store.fingerprint()}" for label, store in self.shards)
        return "sha256:" + hashlib.sha256(parts.encode()).hexdigest()[:16]

    def info(self) -> dict[str, Any]:
        rows = [dict(store.info(), shard=label) for label, store in self.shards]
        first = rows[0]
        return {
            "name": self.name,
            "count": sum(r["count"] for r in rows),
            "model": first["model"],
            "dimension": first["dimension"],
            "encoder_backend": first["encoder_backend"],
            "location": self.location,
            "allow_partial": self.allow_partial,
            "shards": rows,
        }

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
