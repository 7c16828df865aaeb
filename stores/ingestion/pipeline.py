"""Batched, idempotent, resumable ingestion of corpus/benchmark files into a store: each batch
embeds and upserts only the ids the store lacks, so a killed run resumes and a second adds nothing.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tqdm.auto import tqdm

from parallelsearch.stores.ingestion.jsonfiles import SkipReport
from parallelsearch.stores.ingestion.passage_budget import settle_budget
from parallelsearch.stores.ingestion.passage_limit import (
    DEFAULT_MAX_TOKENS,
    PassageLimit,
    tokenizer_of,
)
from parallelsearch.stores.ingestion.readers import read_passages
from parallelsearch.stores.passages import Passage

if TYPE_CHECKING:
    from parallelsearch.stores.passage_store import PassageStore


@dataclass
class IngestReport:
    added: int = 0
    already_present: int = 0
    duplicates_in_input: int = 0
    skipped: SkipReport = field(default_factory=SkipReport)
    seconds: float = 0.0
    encode_seconds: float = 0.0
    truncated: int = 0  # over-long passages cut to the token budget (passage_limit.py)
    split: int = 0  # over-long passages split into pieces
    pieces: int = 0  # the passages those became
    budget: str = ""  # what the store's passage budget check decided (passage_budget.py)

    @property
    def passages_per_s(self) -> float:
        return self.added / self.seconds if self.seconds > 0 else 0.0

    def to_dict(self) -> dict:
        return {
            "added": self.added,
            "already_present": self.already_present,
            "duplicates_in_input": self.duplicates_in_input,
            "skipped": self.skipped.count,
            "truncated": self.truncated,
            "split": self.split,
            "pieces": self.pieces,
            "seconds": round(self.seconds, 3),
            "passages_per_s": round(self.passages_per_s, 1),
        }


def _batches(passages: Iterable[Passage], size: int, report: IngestReport) -> Iterable[list[Passage]]:
    seen: set[str] = set()
    batch: list[Passage] = []
    for p in passages:
        if p.id in seen:
            report.duplicates_in_input += 1
            continue
        seen.add(p.id)
        batch.append(p)
        if len(batch) >= size:
            yield batch
            batch = []
    if batch:
        yield batch


def _rows(source: Iterable[Passage], start: int, stop: int | None) -> Iterable[Passage]:
    """Passages ``start`` to ``stop`` (0-based, stop None = to the end), the range checked first."""
    if start < 0 or (stop is not None and stop < start):
        raise ValueError(f"rows {start}:{'' if stop is None else stop} is not a range of passages")
    return itertools.islice(source, start, stop)


def ingest(
    store: PassageStore,
    paths: Iterable[str | Path] | None = None,
    *,
    passages: Iterable[Passage] | None = None,
    batch_size: int = 32,
    chunk_size: int = 1024,
    skip_bad: bool = False,
    progress: bool = True,
    max_passage_tokens: int | None = DEFAULT_MAX_TOKENS,
    long_passages: str = "split",
    encoder: Any | None = None,
    rows: tuple[int, int | None] | None = None,
) -> IngestReport:
    """Add every passage of ``paths`` (or of ``passages``) that ``store`` lacks.

    Each chunk of ``chunk_size`` passages is encoded in ONE encoder call, because
    sentence-transformers sorts a call's texts by length (docs/performance.md, "Figures behind the
    code's choices"), and committed before the next is read. Passages over ``max_passage_tokens``
    are split or truncated (``long_passages``); a store split with another budget is refused
    (``passage_budget.py``). ``encoder``: instead of the store's embedder (a
    :class:`~.passage_pool.PassagePool`). ``rows=(start, stop)``: only those passages (0-based,
    before splitting; stop None = to the end), so N processes can each build one shard.
    """
    if batch_size < 1 or chunk_size < 1:
        raise ValueError(f"batch_size and chunk_size must be >= 1, got {batch_size} and {chunk_size}")
    report = IngestReport()
    report.budget = settle_budget(store, max_passage_tokens)  # before anything is read or added
    source = (
        passages
        if passages is not None
        else read_passages(paths or [], skip_bad=skip_bad, report=report.skipped)
    )
    if rows is not None:
        source = _rows(source, *rows)
    if max_passage_tokens is not None:
        tokenizer = tokenizer_of(store.embedder)
        limit = PassageLimit(tokenizer, max_passage_tokens, long_passages, counts=report)
        source = limit.apply(source)
    start = time.perf_counter()
    bar = tqdm(desc=f"indexing into {store.name}", unit="passage", disable=not progress)
    try:
        for batch in _batches(source, max(chunk_size, batch_size), report):
            _add_new(store, batch, encoder or store.embedder, batch_size, report)
            bar.update(len(batch))
    finally:
        bar.close()
    report.seconds = time.perf_counter() - start
    return report


def _add_new(
    store: PassageStore, batch: list[Passage], encoder: Any, batch_size: int, report: IngestReport
) -> None:
    """The passages of ``batch`` the store lacks, encoded in one call and stored."""
    have = store.existing_ids([p.id for p in batch])
    new = [p for p in batch if p.id not in have]
    report.already_present += len(batch) - len(new)
    if new:
        t0 = time.perf_counter()
        vecs = encoder.encode_passages([p.text for p in new], batch_size=batch_size)
        report.encode_seconds += time.perf_counter() - t0
        store.upsert(new, vecs)
        report.added += len(new)
