"""The FAISS flat store against a Chroma store on the same synthetic vectors, in one run.

Rows are random unit vectors (seeded); queries are rows perturbed and renormalised, so each has
near neighbours. Measured per kind: top-k identical to exact search (numpy, float64 scores), the
open time and resident memory of a fresh process that opens the store and answers one search
(per million vectors), and the p50 of one search from 1 and from 32 client threads at once.
Chroma is measured at ``--chroma-rows`` (its HNSW insertion is the slow part: its insert rate is
reported, with the hours a million would take); FAISS at that size and at ``--rows``. The vectors
are made a chunk at a time from a seed per chunk, and made again where they are needed (the exact
search, the queries), so a million 768-d rows cost their index and one chunk, not three copies.
Figures: docs/performance.md, "The FAISS store".
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


#: rows made (and added, and searched exactly) at a time
CHUNK = 50_000


def vectors(lo: int, hi: int, dim: int, seed: int) -> np.ndarray:
    """Rows ``[lo, hi)`` of the seeded set (random unit vectors), the same whatever the chunking."""
    parts = []
    for c in range(lo // CHUNK, (hi - 1) // CHUNK + 1):
        rng = np.random.default_rng([seed, c])
        x = rng.standard_normal((CHUNK, dim), dtype=np.float32)
        x /= np.linalg.norm(x, axis=1, keepdims=True)
        parts.append(x[max(lo - c * CHUNK, 0) : hi - c * CHUNK])
    return np.concatenate(parts)


def chunks(rows: int, dim: int, seed: int):
    for lo in range(0, rows, CHUNK):
        yield lo, vectors(lo, min(lo + CHUNK, rows), dim, seed)


def queries(rows: int, dim: int, seed: int, n: int) -> np.ndarray:
    """Rows picked at random, perturbed and renormalised: each query has a near neighbour."""
    rng = np.random.default_rng(1)
    picked = rng.integers(0, rows, n)
    base = np.zeros((n, dim), dtype=np.float32)
    for c in np.unique(picked // CHUNK):  # each chunk made once
        here = np.flatnonzero(picked // CHUNK == c)
        base[here] = vectors(int(c) * CHUNK, min((int(c) + 1) * CHUNK, rows), dim, seed)[
            picked[here] - c * CHUNK
        ]
    q = base + 0.02 * rng.standard_normal((n, dim), dtype=np.float32)
    return (q / np.linalg.norm(q, axis=1, keepdims=True)).astype(np.float32)


def build_faiss(folder: Path, rows: int, dim: int, seed: int) -> float:
    """The paper's layout: a flat inner-product index and its corpus jsonl, row i = line i; the
    seconds it took."""
    import faiss

    t0 = time.perf_counter()
    folder.mkdir(parents=True, exist_ok=True)
    index = faiss.IndexFlatIP(dim)
    with (folder / "corpus.jsonl").open("w") as f:
        for lo, x in chunks(rows, dim, seed):
            index.add(x)
            f.writelines(
                json.dumps({"id": str(i), "contents": f'"row {i}"\ntext {i}'}) + "\n"
                for i in range(lo, lo + len(x))
            )
    faiss.write_index(index, str(folder / "synthetic_Flat.index"))
    return time.perf_counter() - t0


def build_chroma(folder: Path, rows: int, dim: int, seed: int) -> float:
    """A Chroma store of the same rows, 5,000 per write; the seconds it took."""
    from parallelsearch.stores import ChromaStore, Passage

    t0 = time.perf_counter()
    store = ChromaStore("synthetic", path=folder, embedder=VectorsOnly(dim), hnsw={"ef_search": 200})
    for lo, x in chunks(rows, dim, seed):
        for at in range(0, len(x), 5000):
            ids = range(lo + at, lo + min(at + 5000, len(x)))
            store.upsert([Passage(str(i), f"row {i}", f"text {i}") for i in ids], x[at : at + 5000])
    return time.perf_counter() - t0


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


def exact(rows: int, dim: int, seed: int, q: np.ndarray) -> np.ndarray:
    """Exact top-K rows by inner product in float64, a chunk of rows at a time."""
    best_s = np.full((len(q), 0), -np.inf)
    best_i = np.zeros((len(q), 0), dtype=np.int64)
    for lo, x in chunks(rows, dim, seed):
        s = q.astype(np.float64) @ x.astype(np.float64).T
        top = np.argsort(-s, axis=1, kind="stable")[:, :K]
        cand_s = np.concatenate([best_s, np.take_along_axis(s, top, 1)], axis=1)
        cand_i = np.concatenate([best_i, top + lo], axis=1)
        order = np.argsort(-cand_s, axis=1, kind="stable")[:, :K]
        best_s, best_i = np.take_along_axis(cand_s, order, 1), np.take_along_axis(cand_i, order, 1)
    return best_i


def clients_p50(store, q: np.ndarray, clients: int, per_client: int) -> float:
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


def measure(kind: str, folder: Path, size: tuple[int, int, int], q: np.ndarray, baseline: dict) -> dict:
    """One kind at one size (rows, dim, seed): exactness, a fresh process's open and the memory it
    added over a process with the same imports (``baseline``: resident, and private = anonymous; the
    rest of a FAISS store's is the index file's pages, shared by every process that maps it), and the
    clients' p50 (32 clients x 4 searches: 128 samples)."""
    rows, dim, seed = size
    store = open_kind(kind, str(folder), dim)
    got = [[int(p.id) for p in hits] for hits in store.search_vectors(q, K)]
    want = exact(rows, dim, seed, q)
    per_million = rows / 1e6
    opened = fresh_open(kind, folder, dim)
    return {
        "kind": kind,
        "rows": rows,
        "topk_identical": float(np.mean([g == list(w) for g, w in zip(got, want, strict=True)])),
        "recall_at_k": float(np.mean([len(set(g) & set(w)) / K for g, w in zip(got, want, strict=True)])),
        "open_s_per_million": round(opened["open_s"] / per_million, 3),
        "rss_mib_per_million": round((opened["rss_mib"] - baseline["rss_mib"]) / per_million, 1),
        "private_mib_per_million": round((opened["anon_mib"] - baseline["anon_mib"]) / per_million, 1),
        "p50_ms_1_client": clients_p50(store, q, 1, 20),
        "p50_ms_32_clients": clients_p50(store, q, 32, 4),
    }


def main() -> None:
    p = parser(__doc__)
    p.add_argument("--rows", type=int, default=1_000_000, help="FAISS rows (the large size)")
    p.add_argument("--chroma-rows", type=int, default=100_000, help="rows of the side-by-side comparison")
    p.add_argument("--dim", type=int, default=768)
    p.add_argument("--queries", type=int, default=200)
    p.add_argument("--scratch", type=Path, help="folder for the stores (default: a new temporary one)")
    args = p.parse_args()
    scratch = args.scratch or Path(tempfile.mkdtemp(prefix="faiss-bench-"))
    baseline = fresh_open("none", scratch, args.dim)
    small, large = (args.chroma_rows, args.dim, 0), (args.rows, args.dim, 2)
    q = queries(*small, args.queries)
    built = {
        "chroma": build_chroma(scratch / "chroma", *small),
        "faiss": build_faiss(scratch / "faiss" / "small", *small),
    }
    results = [
        measure("chroma", scratch / "chroma", small, q, baseline),
        measure("faiss", scratch / "faiss" / "small", small, q, baseline),
    ]
    built["faiss_large"] = build_faiss(scratch / "faiss" / "large", *large)
    results.append(
        measure("faiss", scratch / "faiss" / "large", large, queries(*large, args.queries), baseline)
    )
    for r, seconds in zip(results, built.values(), strict=True):
        r["build_vectors_per_s"] = round(r["rows"] / seconds)
        r["build_h_per_million"] = round(1e6 / r["build_vectors_per_s"] / 3600, 3)
    keys = list(results[0])
    print_table(keys, [[str(r[k]) for k in keys] for r in results])
    print(f"baseline process (imports only): {baseline['rss_mib']:.0f} MiB resident")
    write(
        "faiss_store",
        {"dim": args.dim, "k": K, "queries": args.queries, "baseline_mib": baseline, "results": results},
    )


if __name__ == "__main__":
    main()
