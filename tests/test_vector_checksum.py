"""Vector checksums: what Chroma's float32 renormalisation does to a vector never counts as a change,
an overwritten vector always does. Real MiniLM vectors."""

from __future__ import annotations

import numpy as np
import pytest

from parallelsearch.stores.vector_checksum import CHECKSUM_KEY, mismatched, vector_checksums


@pytest.fixture(scope="module")
def vectors(embedder) -> np.ndarray:
    texts = [f"passage number {i} about the river {i % 7} and its towns" for i in range(64)]
    return np.asarray(embedder.encode_passages(texts), dtype=np.float32)


def _renormalised(v: np.ndarray) -> np.ndarray:
    """What a cosine store holds: unit vectors computed in float32 (the bytes differ from the input)."""
    return (v / np.linalg.norm(v, axis=1, keepdims=True).astype(np.float32)).astype(np.float32)


def _metas(sums: list[int]) -> list[dict]:
    return [{"title": "t", CHECKSUM_KEY: s} for s in sums]


def test_a_renormalised_vector_matches_and_an_overwritten_one_does_not(vectors):
    ids = [f"p{i}" for i in range(len(vectors))]
    sums = vector_checksums(vectors, normalize=True)
    stored = _renormalised(vectors * 1.0001)  # not bit-equal to what was given
    assert not np.array_equal(stored, vectors)
    assert mismatched(ids, stored, _metas(sums)) == ([], len(ids))
    rotted = stored.copy()
    rotted[3, 17] += 1e-3  # one coordinate
    rotted[9] = stored[10]  # another passage's vector
    rotted[20] = stored[20][::-1]  # the same numbers in another order
    rotted[30] = stored[30] * 1.01  # scaled
    assert mismatched(ids, rotted, _metas(sums))[0] == ["p3", "p9", "p20", "p30"]


def test_vectors_without_a_checksum_are_not_compared(vectors):
    ids = ["a", "b"]
    assert mismatched(ids, vectors[:2], [{"title": "old"}, None]) == ([], 0)
    sums = vector_checksums(vectors[:2], normalize=False)  # an inner-product store keeps them as given
    assert mismatched(ids, vectors[:2], _metas(sums)) == ([], 2)
    assert vector_checksums(np.zeros((0, 384)), normalize=True) == []
