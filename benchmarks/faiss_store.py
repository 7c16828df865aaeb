"""The FAISS flat store against a Chroma store on the same synthetic vectors, in one run.

Rows are random unit vectors (seeded); queries are rows perturbed and renormalised, so each has
near neighbours. Measured per kind: top-k identical to exact search (numpy, float64 scores), the
open time and resident memory of a fresh process that opens the store and answers one search
(per million vectors), and the p50 of one search from 1 and from 32 client threads at once.
Chroma is measured at ``--chroma-rows`` (its HNSW insertion is the slow part); FAISS at that size
and at ``--rows``. Figures: docs/performance.md, "The FAISS store".
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
from _common import latency, parser, print_table, write

K = 10
#: what a fresh process runs: open the store, answer one search, report the time and its memory
CHILD = """
import json, resource, sys, time
import numpy as np
sys.path.insert(0, {bench!r})
from faiss_store import open_kind
import faiss, chromadb  # the imports both kinds need, in the baseline too
t0 = time.perf_counter()
if {kind!r} != "none":
    store = open_kind({kind!r}, {folder!r}, {dim})
    opened = time.perf_counter() - t0
    store.search_vectors(np.ones((1, {dim}), dtype=np.float32) / {dim} ** 0.5, 3)
else:
    opened = 0.0
status = dict(line.split(":", 1) for line in open("/proc/self/status").read().splitlines())
mib = lambda key: int(status[key].split()[0]) / 1024
print(json.dumps({{"open_s": opened, "rss_mib": mib("VmRSS"), "anon_mib": mib("RssAnon")}}))
"""


class VectorsOnly:
    """The embedder a store of precomputed vectors is opened with: its model's name and dimension
    (every search here goes in as vectors; nothing is encoded)."""

    backend = "torch"

    def __init__(self, dim: int) -> None:
        self.model_name, self.dimension = f"synthetic-{dim}", dim


def vectors(rows: int, dim: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((rows, dim), dtype=np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def queries(base: np.ndarray, n: int) -> np.ndarray:
    rng = np.random.default_rng(1)
    q = base[rng.integers(0, len(base), n)] + 0.02 * rng.standard_normal((n, base.shape[1]), dtype=np.float32)
    return (q / np.linalg.norm(q, axis=1, keepdims=True)).astype(np.float32)


def build_faiss(folder: Path, x: np.ndarray) -> None:
    """The paper's layout: a flat inner-product index and its corpus jsonl, row i = line i."""
    import faiss

    folder.mkdir(parents=True, exist_ok=True)
    index = faiss.IndexFlatIP(x.shape[1])
    index.add(x)
    faiss.write_index(index, str(folder / "synthetic_Flat.index"))
    with (folder / "corpus.jsonl").open("w") as f:
        f.writelines(
            json.dumps({"id": str(i), "contents": f'"row {i}"\ntext {i}'}) + "\n" for i in range(len(x))
        )


def build_chroma(folder: Path, x: np.ndarray) -> None:
    from parallelsearch.stores import ChromaStore, Passage

    store = ChromaStore("synthetic", path=folder, embedder=VectorsOnly(x.shape[1]), hnsw={"ef_search": 200})
    for lo in range(0, len(x), 5000):
        rows = range(lo, min(lo + 5000, len(x)))
        store.upsert([Passage(str(i), f"row {i}", f"text {i}") for i in rows], x[lo : rows.stop])


def open_kind(kind: str, folder: str, dim: int):
    """The store as a server opens it: FAISS memory-mapped, Chroma with its open check."""
    if kind == "faiss":
        from parallelsearch.stores.faiss_store import FaissStore, find_files

        files = find_files(Path(folder).parent, Path(folder).name)
        return FaissStore(files, VectorsOnly(dim), location=folder, gpu=False)
    from parallelsearch.stores import ChromaStore

    store = ChromaStore("synthetic", path=folder, embedder=VectorsOnly(dim), create=False)
    store.probe()
    return store


def fresh_open(kind: str, folder: Path, dim: int) -> dict:
    code = CHILD.format(bench=str(Path(__file__).parent), kind=kind, folder=str(folder), dim=dim)
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=1800
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def exact(x: np.ndarray, q: np.ndarray, block: int = 50_000) -> np.ndarray:
    """Exact top-K rows by inner product in float64, a block of rows at a time."""
    best_s = np.full((len(q), 0), -np.inf)
    best_i = np.zeros((len(q), 0), dtype=np.int64)
    for lo in range(0, len(x), block):
        s = q.astype(np.float64) @ x[lo : lo + block].astype(np.float64).T
        top = np.argsort(-s, axis=1, kind="stable")[:, :K]
        cand_s = np.concatenate([best_s, np.take_along_axis(s, top, 1)], axis=1)
        cand_i = np.concatenate([best_i, top + lo], axis=1)
        order = np.argsort(-cand_s, axis=1, kind="stable")[:, :K]
        best_s, best_i = np.take_along_axis(cand_s, order, 1), np.take_along_axis(cand_i, order, 1)
    return best_i


def clients_p50(store, q: np.ndarray, clients: int, per_client: int = 20) -> float:
    """p50 ms of one search while ``clients`` threads search at once."""

    def run(c: int) -> list[float]:
        out = []
        for i in range(per_client):
            t0 = time.perf_counter()
            store.search_vectors(q[(c * per_client + i) % len(q)][None], 3)
            out.append(1000 * (time.perf_counter() - t0))
        return out

    with ThreadPoolExecutor(clients) as pool:
        ms = [m for part in pool.map(run, range(clients)) for m in part]
    return latency(ms, 3)["p50_ms"]


def measure(kind: str, folder: Path, x: np.ndarray, q: np.ndarray, baseline: dict) -> dict:
    """One kind at one size: exactness, a fresh process's open and the memory it added over a
    process with the same imports (``baseline``: resident, and private = anonymous; the rest of a
    FAISS store's is the index file's pages, shared by every process that maps it), and the clients' p50."""
    store = open_kind(kind, str(folder), x.shape[1])
    got = [[int(p.id) for p in hits] for hits in store.search_vectors(q, K)]
    want = exact(x, q)
    per_million = len(x) / 1e6
    opened = fresh_open(kind, folder, x.shape[1])
    return {
        "kind": kind,
        "rows": len(x),
        "topk_identical": float(np.mean([g == list(w) for g, w in zip(got, want, strict=True)])),
        "recall_at_k": float(np.mean([len(set(g) & set(w)) / K for g, w in zip(got, want, strict=True)])),
        "open_s_per_million": round(opened["open_s"] / per_million, 3),
        "rss_mib_per_million": round((opened["rss_mib"] - baseline["rss_mib"]) / per_million, 1),
        "private_mib_per_million": round((opened["anon_mib"] - baseline["anon_mib"]) / per_million, 1),
        "p50_ms_1_client": clients_p50(store, q, 1),
        "p50_ms_32_clients": clients_p50(store, q, 32),
    }


def main() -> None:
    p = parser(__doc__)
    p.add_argument("--rows", type=int, default=500_000, help="FAISS rows (the large size)")
    p.add_argument("--chroma-rows", type=int, default=50_000, help="rows of the side-by-side comparison")
    p.add_argument("--dim", type=int, default=768)
    p.add_argument("--queries", type=int, default=200)
    args = p.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="faiss-bench-"))
    results = []
    baseline = fresh_open("none", scratch, args.dim)
    small = vectors(args.chroma_rows, args.dim)
    q = queries(small, args.queries)
    build_chroma(scratch / "chroma", small)
    build_faiss(scratch / "faiss" / "small", small)
    results.append(measure("chroma", scratch / "chroma", small, q, baseline))
    results.append(measure("faiss", scratch / "faiss" / "small", small, q, baseline))
    del small
    large = vectors(args.rows, args.dim, seed=2)
    build_faiss(scratch / "faiss" / "large", large)
    results.append(
        measure("faiss", scratch / "faiss" / "large", large, queries(large, args.queries), baseline)
    )
    keys = list(results[0])
    print_table(keys, [[str(r[k]) for k in keys] for r in results])
    print(f"baseline process (imports only): {baseline['rss_mib']:.0f} MiB resident")
    write(
        "faiss_store",
        {"dim": args.dim, "k": K, "queries": args.queries, "baseline_mib": baseline, "results": results},
    )


if __name__ == "__main__":
    main()
