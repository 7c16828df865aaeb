"""Ingestion from precomputed vectors (re-embedding wiki-18 is days on CPU): a corpus jsonl plus its
vectors, line i (blank lines aside) being row i, streamed a chunk at a time in bounded memory.

Like text ingestion, each chunk upserts only the ids the store lacks, so a killed run resumes. The
store records the vectors' model, which the query encoder must then match. Ids: a record's ``id``
when it has one, else the content hash text ingestion uses.
"""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from tqdm.auto import tqdm

from parallelsearch.stores.errors import BadInputError, at_least
from parallelsearch.stores.ingestion.pipeline import IngestReport
from parallelsearch.stores.ingestion.readers import passage_pairs
from parallelsearch.stores.ingestion.vector_files import VectorFile, open_vectors
from parallelsearch.stores.passages import Passage, passage_id

if TYPE_CHECKING:
    from parallelsearch.stores.chroma_store import ChromaStore

#: rows per chunk; Chroma's embedded max batch is 5461 on this build (``client.get_max_batch_size``)
DEFAULT_CHUNK = 5000


class RecordedModel:
    """Stands in for the embedder when the vectors come precomputed: the model's name and dimension
    for the store to record, and no weights; encoding with it is an error that says so."""

    def __init__(self, model_name: str, dimension: int) -> None:
        self.model_name = model_name
        self.dimension = int(dimension)

    def _no_encoder(self, *_args: object, **_kwargs: object) -> np.ndarray:
        raise RuntimeError(
            f"this store handle was opened for precomputed {self.model_name!r} vectors and has no encoder; "
            "open the store with the model to search it by text"
        )

    encode_queries = encode_passages = _no_encoder


@dataclass
class VectorIngestReport(IngestReport):
    """What a precomputed-vector ingestion did; ``added`` counts vectors stored."""

    vectors_file: str = ""
    rows: int = 0

    def to_dict(self) -> dict:
        return {**super().to_dict(), "vectors_file": self.vectors_file, "rows": self.rows}


def iter_corpus(path: Path) -> Iterator[tuple[int, Passage | BadInputError]]:
    """``(line, passage)`` per non-blank line; a record that is not one passage yields its error, so
    the caller can skip it together with its vector row (the rows must stay aligned)."""
    with path.open("rb") as f:
        for lineno, raw in enumerate(f, 1):
            if not raw.strip():
                continue
            try:
                rec = json.loads(raw)
                if not isinstance(rec, dict):
                    raise ValueError(f"record is a JSON {type(rec).__name__}, expected an object")
                pairs = passage_pairs(rec)
                if len(pairs) != 1:
                    raise ValueError(
                        f"record holds {len(pairs)} passages; a corpus with precomputed vectors needs one per line"
                    )
                title, text = pairs[0]
                rid = rec.get("id", rec.get("_id"))
                pid = str(rid) if rid is not None and str(rid).strip() else passage_id(title, text)
                yield (
                    lineno,
                    Passage(id=pid, title=title.strip(), text=text.strip(), source=f"{path}:{lineno}"),
                )
            except (ValueError, KeyError, TypeError, UnicodeDecodeError) as e:
                reason = f"missing field {e}" if isinstance(e, KeyError) else str(e)
                yield lineno, BadInputError(str(path), lineno, reason)


def check_count(corpus: Path, vectors: VectorFile) -> int:
    """One vector per corpus passage, or an error naming both files; returns the count."""
    with Path(corpus).open("rb") as f:
        lines = sum(1 for raw in f if raw.strip())
    if lines != vectors.count:
        raise BadInputError(
            str(vectors.path),
            None,
            f"holds {vectors.count} vectors but the corpus {corpus} holds {lines} passages "
            "(row i of the vectors must be passage i of the corpus)",
        )
    return lines


def check_vectors(store: ChromaStore, corpus: Path, vectors: VectorFile, *, count: bool = True) -> None:
    """Dimension (and count) checks before anything is written."""
    dim = int(store.embedder.dimension)
    if vectors.dimension != dim:
        raise BadInputError(
            str(vectors.path),
            None,
            f"vectors have dimension {vectors.dimension}, but store {store.name!r} takes "
            f"{store.embedder.model_name!r} vectors of dimension {dim}",
        )
    if count:
        check_count(corpus, vectors)


def ingest_vectors(
    store: ChromaStore,
    corpus: str | Path,
    vectors: str | Path | VectorFile,
    *,
    key: str | None = None,
    chunk_size: int = DEFAULT_CHUNK,
    skip_bad: bool = False,
    progress: bool = True,
    count_checked: bool = False,
    rows: tuple[int, int | None] | None = None,
) -> VectorIngestReport:
    """Add every passage of ``corpus`` with its row of ``vectors`` that ``store`` lacks.

    ``count_checked``: the caller already ran :func:`check_count` (it is one pass over the corpus).
    ``rows``: only passages ``[start, stop)`` (0-based, blank lines not counted; stop None = to
    the end): one shard of a corpus too large for one store (docs/scaling.md).
    """
    at_least("chunk_size", chunk_size)
    corpus = Path(corpus)
    if not corpus.is_file():
        raise BadInputError(str(corpus), None, "no such file")
    own = isinstance(vectors, str | Path)
    vf = open_vectors(vectors, key) if own else vectors
    try:
        max_batch = int(store.client.get_max_batch_size())
    except Exception:  # pragma: no cover - clients without the call
        max_batch = DEFAULT_CHUNK
    chunk_size = max(1, min(chunk_size, max_batch))
    report = VectorIngestReport(vectors_file=str(vf.path), rows=vf.count)
    start = time.perf_counter()
    try:
        check_vectors(store, corpus, vf, count=not count_checked)
        first, last = _row_range(rows, vf)
        report.rows = last - first
        bar = tqdm(
            total=last - first, desc=f"indexing vectors into {store.name}", unit="vec", disable=not progress
        )
        try:
            row, items = first, itertools.islice(iter_corpus(corpus), first, last)
            while chunk := list(itertools.islice(items, chunk_size)):
                _commit(store, vf, row, chunk, report, skip_bad)
                row += len(chunk)
                bar.update(len(chunk))
        finally:
            bar.close()
    finally:
        if own:
            vf.close()
    report.seconds = time.perf_counter() - start
    return report


def _row_range(rows: tuple[int, int | None] | None, vf: VectorFile) -> tuple[int, int]:
    if rows is None:
        return 0, vf.count
    first, last = rows[0], vf.count if rows[1] is None else rows[1]
    if not 0 <= first < last <= vf.count:
        raise BadInputError(str(vf.path), None, f"row range {first}:{last} is not within its {vf.count} rows")
    return first, last


def parse_rows(text: str) -> tuple[int, int | None]:
    """``START:STOP`` (either may be empty) as a row range; a ValueError names the text."""
    start, sep, stop = text.partition(":")
    try:
        if not sep:
            raise ValueError
        return int(start or 0), (int(stop) if stop else None)
    except ValueError:
        raise ValueError(f"--rows {text!r} is not START:STOP (e.g. 0:3000000)") from None


def shard_rows(text: str, total: int) -> tuple[int, int]:
    """``I/N`` (shard I of N, 0-based) as the row range it covers of ``total`` rows: N near-equal
    consecutive ranges, so N processes given 0/N .. N-1/N build every row once."""
    i, sep, n = text.partition("/")
    try:
        if not sep:
            raise ValueError
        index, count = int(i), int(n)
    except ValueError:
        raise ValueError(f"--shard {text!r} is not I/N (e.g. 0/8 .. 7/8)") from None
    if count < 1 or not 0 <= index < count:
        raise ValueError(f"--shard {text!r}: I must be 0..N-1 and N >= 1")
    return index * total // count, (index + 1) * total // count


def _commit(
    store: ChromaStore,
    vf: VectorFile,
    row: int,
    chunk: list[tuple[int, Passage | BadInputError]],
    report: VectorIngestReport,
    skip_bad: bool,
) -> None:
    """Upsert one chunk's passages the store lacks, each with its own row of the vectors."""
    keep: list[int] = []
    seen: set[str] = set()
    for i, (_line, item) in enumerate(chunk):
        if isinstance(item, BadInputError):
            if not skip_bad:
                raise item
            report.skipped.add(item)
            continue
        if item.id in seen:
            report.duplicates_in_input += 1
            continue
        seen.add(item.id)
        keep.append(i)
    if not keep:
        return
    have = store.existing_ids([chunk[i][1].id for i in keep])
    new = [i for i in keep if chunk[i][1].id not in have]
    report.already_present += len(keep) - len(new)
    if not new:
        return
    t0 = time.perf_counter()
    rows = vf.rows(row, row + len(chunk))
    if rows.shape[0] != len(chunk):
        raise BadInputError(str(vf.path), None, f"ends at row {row + rows.shape[0]}, the corpus goes on")
    report.encode_seconds += time.perf_counter() - t0  # here: reading the vectors
    store.upsert([chunk[i][1] for i in new], rows[new])
    report.added += len(new)
