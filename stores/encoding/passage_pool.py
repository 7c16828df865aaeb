"""Passage encoding on several processes or GPUs (sentence-transformers' multi-process pool).

Text ingestion starts one worker per listed device (``cuda:0,cuda:1`` or ``cpu,cpu``); each chunk
is split among them and the embeddings come back in order. Queries never use the pool: a round
trip costs more than encoding a few.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from parallelsearch.stores.encoding.backend import check_device
from parallelsearch.stores.errors import at_least


def device_list(device: str | None, processes: int | None) -> list[str] | None:
    """The pool's devices from ``--device`` (comma list allowed) and ``--processes``; None = no pool
    (a single device). ``cuda`` with ``--processes 4`` means ``cuda:0`` .. ``cuda:3``."""
    devices = [d.strip() for d in (device or "").split(",") if d.strip()]
    at_least("--processes", processes, none_ok=True)
    if len(devices) > 1:
        if processes is not None and processes != len(devices):
            raise ValueError(f"--processes {processes} contradicts the {len(devices)} devices in --device")
        pool = devices
    elif processes is None or processes == 1:
        return None
    else:
        base = devices[0] if devices else "cpu"
        pool = [f"cuda:{i}" for i in range(processes)] if base == "cuda" else [base] * processes
    return pool


class PassagePool:
    """A context manager: ``encode_passages`` on a pool of worker processes, one per device."""

    def __init__(self, embedder: Any, devices: list[str]) -> None:
        for d in devices:  # before any worker starts: a worker's failure would be a traceback per process
            check_device(d)
        self.embedder = embedder
        self.devices = devices
        self._pool: dict[str, Any] | None = None
        self.calls = 0

    @property
    def _model(self) -> Any:
        return self.embedder._model

    def __enter__(self) -> PassagePool:
        self._pool = self._model.start_multi_process_pool(target_devices=self.devices)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._pool is not None:
            self._model.stop_multi_process_pool(self._pool)
            self._pool = None

    def encode_passages(self, texts: list[str], batch_size: int = 64) -> np.ndarray:
        if self._pool is None:
            raise RuntimeError("the encoding pool is not started (use it as a context manager)")
        if not texts:
            return np.zeros((0, self.embedder.dimension), dtype=np.float32)
        self.calls += 1
        texts = [self.embedder.passage_prefix + t for t in texts]
        vecs = self._model.encode(
            texts,
            pool=self._pool,
            batch_size=batch_size,
            normalize_embeddings=True,
            convert_to_numpy=True,
            show_progress_bar=False,
            # one slice per worker per chunk: fewer queue round trips, length-sorted within each
            chunk_size=max(1, -(-len(texts) // len(self.devices))),
        )
        return np.asarray(vecs, dtype=np.float32).reshape(len(texts), -1)
