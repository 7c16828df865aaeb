"""Shared helpers for benchmark scripts: data paths, a small real store, JSON output."""

from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RAW = Path(os.environ.get("PARALLELSEARCH_SHARED_DATA", ROOT.parent / "shared" / "data")) / "raw"
OUT = ROOT / "benchmarks" / "results"
HOTPOT = RAW / "hotpotqa" / "hahahajw_Agentic-RAG" / "HotpotQA_500_benchmark.json"


def write(name: str, data: dict) -> Path:
    OUT.mkdir(parents=True, exist_ok=True)
    path = OUT / f"{name}.json"
    path.write_text(json.dumps(data, indent=2))
    print(f"wrote {path}")
    return path


def median_ms(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1000)
    return statistics.median(times)


def hotpot_store(n_questions: int = 60, name: str = "bench"):
    """A real embedded store with the context paragraphs of the first n HotpotQA questions."""
    from parallelsearch.stores import ChromaStore, ingest

    if not HOTPOT.is_file():
        sys.exit(f"benchmark data {HOTPOT} is missing")
    recs = json.loads(HOTPOT.read_text())[:n_questions]
    tmp = Path(tempfile.mkdtemp())
    f = tmp / "hp.json"
    f.write_text(json.dumps(recs))
    store = ChromaStore(name, path=tmp / "db")
    ingest(store, [f], progress=False)
    return store, recs
