"""What every store kind offers (:class:`PassageStore`): ingestion, the store searcher, ``stores``,
``--check`` and ``--verify`` are written against it, so a new kind (a module and one row of
``graphs.factory.STORE_KINDS``) reaches all of them. Chroma (``chroma_store.py``) is the default
kind; the others are listed in that table."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import numpy as np

from parallelsearch.stores.passages import Passage

if TYPE_CHECKING:
    from parallelsearch.stores.encoding.embedder import Embedder
    from parallelsearch.stores.store_check import StoreCheck


@runtime_checkable
class PassageStore(Protocol):
    """A named store of passages searched by the vectors of one embedder."""

    name: str
    embedder: Embedder
    #: where the store lives, as people read it (a folder, a server URL)
    location: str

    def count(self) -> int:
        """Passages held."""
        ...

    def existing_ids(self, ids: Sequence[str]) -> set[str]:
        """Which of ``ids`` the store holds (what a resumed ingestion skips)."""
        ...

    def upsert(
        self, passages: Sequence[Passage], embeddings: Sequence[Sequence[float]] | None = None
    ) -> None:
        """Store ``passages`` (with their vectors, else encoded here)."""
        ...

    def search(self, query: str, k: int = 3) -> list[Passage]: ...

    async def asearch(self, query: str, k: int = 3) -> list[Passage]: ...

    def search_batch(self, queries: Sequence[str], k: int = 3) -> list[list[Passage]]:
        """Top-k for every query with one encoder call."""
        ...

    def search_vectors(self, vecs: np.ndarray, k: int = 3) -> list[list[Passage]]: ...

    def info(self) -> dict[str, Any]:
        """Name, count, model and location, as ``stores`` lists them."""
        ...

    def fingerprint(self) -> str:
        """A cheap hash that tells two corpora apart (``/health``, ``train --check``)."""
        ...

    def recorded_budget(self) -> int | None:
        """The passage token budget the store's passages were split with (0: stored whole), or None
        when none is recorded yet (``ingestion/passage_budget.py``)."""
        ...

    def record_budget(self, budget: int) -> None:
        """Record the budget (the first run that adds passages does)."""
        ...

    def verify(self, batch_size: int = 512, progress: bool = False) -> StoreCheck:
        """Read every vector back; what is missing, unreadable or overwritten."""
        ...


@contextlib.contextmanager
def dropped_unless_written(store: Any) -> Iterator[Any]:
    """``store`` for a writer's block; a store the opening created (``store.created``) is dropped
    again when the block fails before adding anything, so a failed first ``index`` leaves no store."""
    try:
        yield store
    except BaseException:
        with contextlib.suppress(Exception):  # the error that got here is the one to report
            if store.created and store.count() == 0:
                store.drop()
        raise
