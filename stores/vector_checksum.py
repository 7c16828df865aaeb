"""A checksum per stored vector, recorded at ingestion and compared when the vector is read back.

A vector overwritten in the index files (bit rot, a stray write) is still a finite vector of the
right size: the store opens and searches, and the answers change without a word. So every
passage records a checksum of its vector in its metadata (:data:`CHECKSUM_KEY`), and
``stores --check`` (every vector) and the open check (a sample) compare it with what Chroma
reads back. Chroma renormalises the vectors of a cosine store in float32, so the stored bytes
differ from the given ones by rounding: the checksum is three fixed +-1 projections of the
vector, each quantised to 1/4096 and packed into one 63-bit integer, and a read-back vector
matches when each projection is within one step. A change of any coordinate by more than
about 5e-4 is found; rounding (about 1e-7 a coordinate) never is.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from typing import Any

import numpy as np

#: the metadata key of a passage's vector checksum (absent in stores made before checksums)
CHECKSUM_KEY = "ps_vsum"
_SCALE = 4096.0
_BITS = 21
_LIMIT = (1 << (_BITS - 1)) - 1
_SEED = 20250812


@lru_cache(maxsize=8)
def _signs(dimension: int) -> np.ndarray:
    """The three +-1 projection vectors for ``dimension`` (fixed: every process derives the same)."""
    return np.random.default_rng(_SEED).choice(np.array([-1.0, 1.0]), size=(3, dimension))


def _quantised(vectors: np.ndarray) -> np.ndarray:
    projected = np.asarray(vectors, dtype=np.float64) @ _signs(vectors.shape[1]).T
    return np.clip(np.rint(projected * _SCALE), -_LIMIT, _LIMIT).astype(np.int64)


def vector_checksums(vectors: Any, *, normalize: bool) -> list[int]:
    """The checksum of each row of ``vectors`` as the store will hold it (``normalize``: a cosine
    store, which keeps unit vectors)."""
    v = np.asarray(vectors, dtype=np.float64)
    if v.ndim != 2 or not len(v):
        return []
    if normalize:
        norms = np.linalg.norm(v, axis=1, keepdims=True)
        v = v / np.where(norms > 0, norms, 1.0)
    q = _quantised(v) & ((1 << _BITS) - 1)
    return [int(a | (b << _BITS) | (c << (2 * _BITS))) for a, b, c in q]


def _unpack(checksum: int) -> np.ndarray:
    parts = [(checksum >> (i * _BITS)) & ((1 << _BITS) - 1) for i in range(3)]
    return np.array([p - (1 << _BITS) if p > _LIMIT else p for p in parts], dtype=np.int64)


def mismatched(ids: Sequence[str], vectors: Sequence[Any], metadatas: Sequence[Any]) -> tuple[list[str], int]:
    """Of the vectors read back, the ids whose vector differs from its recorded checksum, and how
    many had a checksum to compare with (0: a store made before checksums were recorded)."""
    bad, compared = [], 0
    for pid, vec, meta in zip(ids, vectors, metadatas, strict=True):
        recorded = (meta or {}).get(CHECKSUM_KEY)
        if not isinstance(recorded, int) or vec is None or not len(vec):
            continue
        compared += 1
        now = _quantised(np.asarray(vec, dtype=np.float64)[None, :])[0]
        if np.abs(now - _unpack(recorded)).max() > 1:
            bad.append(pid)
    return bad, compared


def rot_message(store: str, bad: Sequence[str], read: int) -> str:
    """The finding for vectors that differ from their checksums (the caller adds the repair)."""
    shown = ", ".join(bad[:5]) + (", ..." if len(bad) > 5 else "")
    return (
        f"{len(bad)} of {read} vector(s) read back differ from the checksum recorded when they were "
        f"indexed (overwritten in the index files: search would rank by wrong vectors): {shown}"
    )
