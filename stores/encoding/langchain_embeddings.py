"""The project's encoder as a LangChain ``Embeddings``, so a user's own vector store
(``InMemoryVectorStore(embedding=...)``, ``langchain_chroma.Chroma(embedding_function=...)``)
embeds with the packaged all-MiniLM-L6-v2 without an adapter, and exactly as our stores do.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from langchain_core.embeddings import Embeddings

if TYPE_CHECKING:
    from parallelsearch.stores.config import RetrievalConfig
    from parallelsearch.stores.encoding.embedder import Embedder


class ParallelSearchEmbeddings(Embeddings):
    """Documents are encoded as a store encodes passages, queries as a store encodes queries (the
    configuration's prefixes, unit-length vectors), by the process's shared :class:`Embedder` for
    that configuration: one encoder however many vector stores, stores and searchers use it.

    ``model``: a sentence-transformers name or path over ``config`` (default: the packaged
    all-MiniLM-L6-v2); ``config``: a :class:`RetrievalConfig` (``settings.retrieval()`` shares the
    app's encoder); ``embedder``: one already built. The encoder loads at the first embedding, so
    a module that builds a vector store at import stays quick to import.
    """

    def __init__(
        self,
        model: str | None = None,
        *,
        config: RetrievalConfig | None = None,
        embedder: Embedder | None = None,
        device: str | None = None,
    ) -> None:
        if embedder is not None and (model is not None or config is not None):
            raise TypeError("pass an embedder, or a model and/or a config to build one, not both")
        self._config = config
        self._model = model
        self._device = device
        self._embedder = embedder
        self._lock = threading.Lock()

    @property
    def embedder(self) -> Embedder:
        """The shared encoder (built at the first use)."""
        if self._embedder is None:
            with self._lock:
                if self._embedder is None:
                    self._embedder = self._build()
        return self._embedder

    def _build(self) -> Embedder:
        from parallelsearch.stores.config import RetrievalConfig
        from parallelsearch.stores.encoding.embedder import make_embedder

        cfg = self._config if self._config is not None else RetrievalConfig()
        if self._model is not None:
            cfg = cfg.model_copy(update={"embedding_model": self._model})
        return make_embedder(cfg, device=self._device)

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return self.embedder.encode_passages(list(texts)).tolist()

    def embed_query(self, text: str) -> list[float]:
        return self.embedder.encode_queries([text])[0].tolist()

    def __repr__(self) -> str:
        model = self._model or (self._config.embedding_model if self._config is not None else None)
        if self._embedder is not None:
            model = f"{self._embedder.model_name} ({self._embedder.backend})"
        return f"ParallelSearchEmbeddings({model or 'default model'})"
