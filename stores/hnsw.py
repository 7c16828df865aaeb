"""Chroma's HNSW parameters for a store: chosen at creation, recorded by Chroma, shown by ``stores``.

Chroma 1.5 keeps them in the collection's configuration (``space``, ``ef_construction``,
``max_neighbors`` (HNSW's M), ``ef_search``). Only ``ef_search`` can change after creation
(``collection.modify``), and a process that already loaded the index keeps searching with
the old value: the change takes effect in processes that open the store afterwards. The
rest are fixed, because they shape the graph that is built as vectors arrive.
"""

from __future__ import annotations

from typing import Any, Literal, get_args

#: parameters a store may be created with; ``space`` decides the score (1 - distance)
HnswKey = Literal["space", "ef_construction", "max_neighbors", "ef_search"]
HNSW_KEYS: tuple[str, ...] = get_args(HnswKey)
#: what can change after creation
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
    """Check ``requested`` against an existing collection; change ``ef_search`` if it differs.

    A creation-only parameter that differs is an error (the store would silently keep its
    own); returns the parameters that were changed.
    """
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
