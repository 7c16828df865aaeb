"""Shared helpers for benchmark scripts: data paths, a small real store, percentiles (the
package's own, :func:`parallelsearch.eval.summary.percentile`), timed concurrent calls, tables,
JSON output and plots."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path
from typing import TypeVar

import numpy as np

from parallelsearch.eval.summary import percentile
from parallelsearch.stores.passages import Passage

ROOT = Path(__file__).resolve().parents[1]
RAW = Path(os.environ.get("PARALLELSEARCH_SHARED_DATA", ROOT.parent / "shared" / "data")) / "raw"
OUT = ROOT / "benchmarks" / "results"
HOTPOT = RAW / "hotpotqa" / "hahahajw_Agentic-RAG" / "HotpotQA_500_benchmark.json"
K = TypeVar("K")
T = TypeVar("T")


def parser(doc: str) -> argparse.ArgumentParser:
    """A script's argument parser: its docstring's first paragraph, each option's default in --help."""
    return argparse.ArgumentParser(
        description=doc.split("\n\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )


def write(name: str, data: dict) -> dict:
    """``data`` written to ``results/<name>.json`` (the path said on stdout), and returned."""
    OUT.mkdir(parents=True, exist_ok=True)
    path = OUT / f"{name}.json"
    path.write_text(json.dumps(data, indent=2))
    print(f"wrote {path}")
    return data


def require(path: Path) -> Path:
    """``path``, or exit naming it when the benchmark data is missing."""
    if not path.is_file():
        sys.exit(f"benchmark data {path} is missing")
    return path


def latency(ms: list[float], digits: int | None = None) -> dict:
    """``{"p50_ms", "p95_ms"}`` of latencies in ms."""
    return {"p50_ms": percentile(ms, 0.5, digits), "p95_ms": percentile(ms, 0.95, digits)}


def mean(xs: Iterable[float | None]) -> float | None:
    """The mean of the values that are not None, to 4 digits; None when there are none."""
    vals = [float(x) for x in xs if x is not None]
    return round(statistics.fmean(vals), 4) if vals else None


async def gather_limited(
    fn: Callable[[object], Awaitable[object]], items: Iterable, concurrency: int
) -> tuple[list, list[float], float]:
    """Every item through ``fn`` with at most ``concurrency`` in flight: (results in order, each
    call's ms, wall seconds of the whole)."""
    sem = asyncio.Semaphore(concurrency)
    ms: list[float] = []

    async def one(item: object) -> object:
        async with sem:
            t0 = time.perf_counter()
            try:
                return await fn(item)
            finally:
                ms.append((time.perf_counter() - t0) * 1000)

    t0 = time.perf_counter()
    results = await asyncio.gather(*(one(x) for x in items))
    return results, ms, time.perf_counter() - t0


def print_table(header: list[str], rows: list[list[str]]) -> None:
    """Cells right-aligned under ``header``, each column as wide as its widest cell."""
    widths = [max(map(len, column)) for column in zip(header, *rows, strict=True)]
    for row in (header, *rows):
        print(" ".join(cell.rjust(w) for cell, w in zip(row, widths, strict=True)))


def fmt(value: float | None, spec: str) -> str:
    """``value`` formatted with ``spec``, or ``n/a`` (as wide) for a figure with no samples."""
    return "n/a".rjust(len(format(0.0, spec))) if value is None else format(value, spec)


class InstantSearcher:
    """A searcher that answers at once with the query as its one passage: the graph's own cost."""

    name = "instant"

    async def asearch(self, query: str, k: int = 3) -> list[Passage]:
        return [Passage(query, query, "text", 1.0, self.name)]


def exact_topk(vectors: np.ndarray, queries: np.ndarray, k: int = 3) -> np.ndarray:
    """Exact top-k row indices by cosine (``vectors`` normalised; an array or a memmap, read in
    chunks of 100,000 rows): what an approximate index's recall is measured against."""
    q = queries / np.linalg.norm(queries, axis=1, keepdims=True)
    best_s = np.full((len(q), k), -np.inf, dtype=np.float32)
    best_i = np.zeros((len(q), k), dtype=np.int64)
    for lo in range(0, len(vectors), 100_000):
        s = q @ np.asarray(vectors[lo : lo + 100_000]).T
        top = np.argpartition(-s, min(k, s.shape[1]) - 1, axis=1)[:, :k]
        cand_s = np.concatenate([best_s, np.take_along_axis(s, top, 1)], axis=1)
        cand_i = np.concatenate([best_i, top + lo], axis=1)
        order = np.argsort(-cand_s, axis=1)[:, :k]
        best_s, best_i = np.take_along_axis(cand_s, order, 1), np.take_along_axis(cand_i, order, 1)
    return best_i


def recall(got: list[list[str]], exact: np.ndarray) -> float:
    """Recall@k of result ids (row numbers as strings) against :func:`exact_topk`."""
    k = exact.shape[1]
    return sum(len({str(i) for i in ex} & set(g[:k])) for g, ex in zip(got, exact, strict=True)) / exact.size


def interleaved_ms(variants: dict[str, Callable[[], object]], rounds: int) -> dict[str, float]:
    """Median ms per call of each variant: one warm-up call each, then ``rounds`` rounds that run
    every variant once in turn, so a slow patch of a shared machine hits them alike."""
    for fn in variants.values():
        fn()
    samples: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(rounds):
        for name, fn in variants.items():
            t0 = time.perf_counter()
            fn()
            samples[name].append((time.perf_counter() - t0) * 1000)
    return {name: statistics.median(v) for name, v in samples.items()}


def alternating(
    variants: Iterable[K], rounds: Iterable[int], sample: Callable[[K, int], T]
) -> dict[K, list[T]]:
    """Each variant's ``sample(variant, r)`` over the rounds, side by side in one process: in
    order on even rounds, in reverse on odd ones, so no variant always runs first (or warmer)."""
    samples: dict[K, list[T]] = {v: [] for v in variants}
    for r in rounds:
        for v in list(samples) if r % 2 == 0 else list(reversed(samples)):
            samples[v].append(sample(v, r))
    return samples


def records_store(
    records: list[dict], name: str, path: Path | None = None, embedder=None, progress: bool = False
):
    """A real embedded store of the context paragraphs of raw HotpotQA records at ``path`` (a new
    temporary folder by default; a store already filled there is reused), and the records' file
    (beside the store's folder)."""
    from parallelsearch.stores import ChromaStore, ingest

    db = Path(path) if path else Path(tempfile.mkdtemp()) / "db"
    db.parent.mkdir(parents=True, exist_ok=True)
    src = db.parent / f"{name}-records.json"
    src.write_text(json.dumps(records))
    store = ChromaStore(name, path=db, embedder=embedder)
    if store.count() == 0:
        ingest(store, [src], progress=progress)
    return store, src


def hotpot_store(n_questions: int = 60, name: str = "bench"):
    """A real embedded store with the context paragraphs of the first n HotpotQA questions."""
    recs = json.loads(require(HOTPOT).read_text())[:n_questions]
    return records_store(recs, name)[0], recs


def plain_encoder() -> Callable[[list[str]], object]:
    """Plain sentence-transformers ``encode`` (untouched ``nn.Linear`` layers, the calling thread):
    the reference the store's encoder is measured against."""
    from sentence_transformers import SentenceTransformer

    from parallelsearch.stores.encoding.embedder import DEFAULT_MODEL, resolve_model_path

    plain = SentenceTransformer(resolve_model_path(DEFAULT_MODEL), device="cpu")
    return lambda qs: plain.encode(
        qs, normalize_embeddings=True, convert_to_numpy=True, show_progress_bar=False
    )


def pyplot():
    """matplotlib's pyplot on the Agg backend, or None (said on stdout) when matplotlib is not
    installed: the figures are printed and written as JSON anyway."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: no plot")
        return None
    return plt


def save(fig, path: Path, dpi: int = 110) -> Path:
    """``fig`` laid out and written to ``path`` (its folder made), then closed."""
    import matplotlib.pyplot as plt

    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=dpi)
    plt.close(fig)
    print(f"wrote {path}")
    return path


def plot_bars(
    path: Path, title: str, groups: dict[str, dict[str, float]], ylabel: str, hline=None
) -> Path | None:
    """A grouped bar chart (``groups``: group label -> {series: value}) saved to ``path``;
    None when matplotlib is missing (the figures are printed and written as JSON anyway)."""
    plt = pyplot()
    if plt is None:
        return None
    series = list(dict.fromkeys(s for row in groups.values() for s in row))
    fig, ax = plt.subplots(figsize=(8, 4))
    width = 0.8 / max(1, len(series))
    for i, s in enumerate(series):
        xs = [g + i * width for g in range(len(groups))]
        ax.bar(xs, [row.get(s, 0.0) for row in groups.values()], width, label=s)
    if hline is not None:
        value, label = hline
        ax.axhline(value, color="black", linestyle="--", linewidth=1, label=label)
    ax.set_xticks([g + width * (len(series) - 1) / 2 for g in range(len(groups))], list(groups))
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend(fontsize=8)
    return save(fig, path)


def rounded(x: object, digits: int) -> object:
    """``x`` with every float in it (through nested dicts and lists) rounded to ``digits``."""
    if isinstance(x, dict):
        return {k: rounded(v, digits) for k, v in x.items()}
    if isinstance(x, list):
        return [rounded(v, digits) for v in x]
    return round(x, digits) if isinstance(x, float) else x


def graph_input(q: dict) -> dict:
    """A prepared question as graph input, its gold answers in the metadata (the oracle reads them)."""
    return {"question": q["question"], "metadata": {**q["metadata"], "golden_answers": q["golden_answers"]}}
