"""A sharded store against one store holding the same vectors, side by side in one process.

Three real ``chroma run`` servers: server 0 holds one collection of all ``--n`` vectors, servers
1 and 2 two collections each (4 shards, searched through ``ShardedStore``), plus a control (the
one store through the sharded code path). Synthetic clustered 384-d vectors (:func:`make_data`),
precomputed query vectors (no encoder). Figures: docs/scaling.md, "4 shards against one store".
"""

from __future__ import annotations

import asyncio
import os
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
from _common import exact_topk, latency, parser, recall, rounded, write
from _server import ChromaServer

DIM = 384
K = 3
CLIENTS = 32
CHUNK = 5000
MODEL = "synthetic-384"


def unit(x: np.ndarray) -> np.ndarray:
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def make_data(n: int, n_queries: int, seed: int = 7) -> tuple[np.ndarray, np.ndarray]:
    """``n / 50`` random centres; each row a centre plus Gaussian noise (cosine 0.7-0.9 to it), each
    query another noisy copy of a random centre: dense neighbourhoods to rank, unlike uniform vectors."""
    rng = np.random.default_rng(seed)
    centres = unit(rng.standard_normal((max(1, n // 50), DIM)))
    noise = rng.uniform(0.5, 1.0, (n, 1)) * rng.standard_normal((n, DIM)) / np.sqrt(DIM)
    rows = unit(centres[rng.integers(0, len(centres), n)] + noise)
    qn = 0.8 * rng.standard_normal((n_queries, DIM)) / np.sqrt(DIM)
    queries = unit(centres[rng.integers(0, len(centres), n_queries)] + qn)
    return rows, queries


def fill(store, rows: np.ndarray, start: int, stop: int) -> float:
    """Upsert rows start..stop-1 (ids = row numbers) unless the store holds them; seconds taken."""
    from parallelsearch.stores.passages import Passage

    if store.count() == stop - start:
        return 0.0
    t0 = time.perf_counter()
    for a in range(start, stop, CHUNK):
        b = min(stop, a + CHUNK)
        store.upsert([Passage(str(i), "", f"row {i}") for i in range(a, b)], rows[a:b])
    return time.perf_counter() - t0


def threads_qps(search, queries: np.ndarray, clients: int) -> float:
    """Queries per second with ``clients`` threads each sending one single-query request at a time."""
    with ThreadPoolExecutor(clients) as pool:
        t0 = time.perf_counter()
        list(pool.map(lambda q: search(q[None, :], K), queries))
        return len(queries) / (time.perf_counter() - t0)


def coalesced_qps(search, queries: np.ndarray, clients: int) -> tuple[float, int]:
    """Queries per second with ``clients`` asyncio clients whose queries are coalesced into batches
    (stores/coalesce.py, the graph's and /retrieve's batching); also the number of batches."""
    from parallelsearch.stores.coalesce import BatchCoalescer

    co = BatchCoalescer(lambda k, items: search(np.stack(items), int(k)), window_s=0.002)
    nxt = iter(range(len(queries)))

    async def client() -> None:
        for i in nxt:
            await co.submit(K, queries[i])

    async def run() -> float:
        t0 = time.perf_counter()
        await asyncio.gather(*(client() for _ in range(clients)))
        return time.perf_counter() - t0

    return len(queries) / asyncio.run(run()), co.batches


def _parse_args():
    """The script's options: store size, query count and where the servers keep their data."""
    ap = parser(__doc__)
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--queries", type=int, default=300)
    ap.add_argument(
        "--scratch",
        type=Path,
        default=Path("/tmp/parallelsearch-shards"),
        help="the Chroma servers' folders (n<N>/server<i>), reused when they hold every row",
    )
    return ap.parse_args()


def ingest(rows: np.ndarray, n: int, ports: list[int], shard_ports: list[int], model) -> tuple:
    """The whole store on server 0 and four shards on servers 1 and 2, filled one thread per server
    so the two layouts take the same wall time to build: (the whole store, seconds each, wall seconds)."""
    from parallelsearch.stores.chroma_store import ChromaStore

    one = ChromaStore("whole", host="127.0.0.1", port=ports[0], embedder=model)
    quarter = n // 4
    bounds = [(j * quarter, n if j == 3 else (j + 1) * quarter) for j in range(4)]
    parts = [
        ChromaStore(f"shard-{j}", host="127.0.0.1", port=shard_ports[j], embedder=model) for j in range(4)
    ]
    # ingest: one thread per server (server 0: the whole store; 1 and 2: two shards each)
    jobs = {
        "one_store": lambda: fill(one, rows, 0, n),
        "shards_server1": lambda: sum(fill(parts[j], rows, *bounds[j]) for j in (0, 1)),
        "shards_server2": lambda: sum(fill(parts[j], rows, *bounds[j]) for j in (2, 3)),
    }
    t0 = time.perf_counter()
    with ThreadPoolExecutor(3) as pool:
        ingest_s = dict(zip(jobs, pool.map(lambda f: f(), jobs.values()), strict=True))
    ingest_wall = time.perf_counter() - t0
    print(f"ingest (0 = reused): {ingest_s}, wall {ingest_wall:.1f} s")
    return one, ingest_s, ingest_wall


def sharded_stores(one, n: int, ports: list[int], shard_ports: list[int], model) -> tuple:
    """The four shards as one ``ShardedStore`` (checked to hold the whole store's ``n`` rows), and the
    control: the whole store behind the sharded code path, so its own cost is told from the fan-out's."""
    from parallelsearch.stores.shard_spec import parse_store
    from parallelsearch.stores.sharded_store import ShardedStore, open_shards

    decl = "sharded=" + ",".join(f"shard-{j}@127.0.0.1:{shard_ports[j]}" for j in range(4))
    sharded = ShardedStore("sharded", open_shards(parse_store(decl), lambda *_: model), model)
    assert one.count() == sharded.count() == n, (one.count(), sharded.count())
    # the control: the one store behind the sharded code path (its own cost, no fan-out)
    one_decl = f"one=whole@127.0.0.1:{ports[0]}"
    wrapped = ShardedStore("one", open_shards(parse_store(one_decl), lambda *_: model), model)
    return sharded, wrapped


def agreement(one, sharded, queries: np.ndarray, exact) -> tuple[float, float, float]:
    """Recall@3 of both layouts against the exact top 3, and how often their top 3 are the same,
    so a speed-up is not bought with worse results."""

    def ids(search) -> list[list[str]]:
        chunks = (search(queries[a : a + 100], K) for a in range(0, len(queries), 100))
        return [[p.id for p in hits] for chunk in chunks for hits in chunk]

    one_ids, sharded_ids = ids(one.search_vectors), ids(sharded.search_vectors)
    r_one, r_sharded = recall(one_ids, exact), recall(sharded_ids, exact)
    same = sum(a == b for a, b in zip(one_ids, sharded_ids, strict=True)) / len(queries)
    return r_one, r_sharded, same


def single_client_latencies(stores: dict, queries: np.ndarray) -> dict[str, list[float]]:
    """Each store's ms per one-query search, after a warm-up, the stores interleaved so load changes
    hit all alike."""
    for q in queries[:20]:  # warm all (HNSW loaded, connections open)
        for store in stores.values():
            store.search_vectors(q[None, :], K)
    lat: dict[str, list[float]] = {name: [] for name in stores}
    for q in queries:  # interleaved, so load changes hit all alike
        for name, store in stores.items():
            t = time.perf_counter()
            store.search_vectors(q[None, :], K)
            lat[name].append((time.perf_counter() - t) * 1000)
    return lat


def many_client_qps(stores: dict, queries: np.ndarray) -> tuple[dict, dict, dict[str, int]]:
    """Each store's queries/s with ``CLIENTS`` clients, as threads and coalesced, twice each, so the
    best of two runs stands for each: (threads, coalesced, the last run's batches)."""
    thr: dict[str, list[float]] = {name: [] for name in stores}
    co: dict[str, list[float]] = {name: [] for name in stores}
    batches: dict[str, int] = {}
    for _ in range(2):
        for name, store in stores.items():
            thr[name].append(threads_qps(store.search_vectors, queries, CLIENTS))
            qps, batches[name] = coalesced_qps(store.search_vectors, queries, CLIENTS)
            co[name].append(qps)
    return thr, co, batches


def main() -> dict:
    """Both layouts built, checked and measured side by side, then the figures printed and written."""
    args = _parse_args()

    from parallelsearch.stores.ingestion.vectors import RecordedModel

    load_before = os.getloadavg()
    rows, queries = make_data(args.n, args.queries)
    exact = exact_topk(rows, queries)
    model = RecordedModel(MODEL, DIM)
    scratch = args.scratch / f"n{args.n}"
    servers = [ChromaServer(scratch / f"server{i}").start() for i in range(3)]
    try:
        ports = [s.port for s in servers]
        shard_ports = [ports[1], ports[1], ports[2], ports[2]]
        one, ingest_s, ingest_wall = ingest(rows, args.n, ports, shard_ports, model)
        sharded, wrapped = sharded_stores(one, args.n, ports, shard_ports, model)
        r_one, r_sharded, same = agreement(one, sharded, queries, exact)
        stores = {"one": one, "one_via_sharded_path": wrapped, "sharded": sharded}
        lat = single_client_latencies(stores, queries)
        thr, co, batches = many_client_qps(stores, queries)
        sharded.close()
        wrapped.close()
    finally:
        for s in servers:
            s.stop()

    p_one, p_sh = latency(lat["one"], 3), latency(lat["sharded"], 3)
    best = {k: {n: round(max(v), 1) for n, v in d.items()} for k, d in (("threads", thr), ("coalesced", co))}
    data = {
        "n": args.n,
        "queries": args.queries,
        "dimension": DIM,
        "shards": "4 (2 servers x 2 collections) vs 1 collection on a third server",
        "ingest_s": rounded(ingest_s, 1),
        "ingest_wall_s": round(ingest_wall, 1),
        "recall_at_3": {"one": round(r_one, 4), "sharded": round(r_sharded, 4)},
        "same_top3_fraction": round(same, 4),
        "latency_1_client": {name: latency(ms, 3) for name, ms in lat.items()},
        "p50_ratio_sharded_over_one": round(p_sh["p50_ms"] / p_one["p50_ms"], 3),
        "qps_32_clients": best,
        "qps_runs": {"threads": thr, "coalesced": co},
        "coalesced_batches_last_run": batches,
        "throughput_ratio_sharded_over_one": {k: round(v["sharded"] / v["one"], 3) for k, v in best.items()},
        "loadavg_before": rounded(list(load_before), 2),
        "loadavg_after": rounded(list(os.getloadavg()), 2),
        "cpus": os.cpu_count(),
        "python": sys.version.split()[0],
        "threads_alive_at_end": threading.active_count(),
    }
    print_figures(data, lat, r_one, r_sharded, same)
    return write("shards", data)


def print_figures(
    data: dict, lat: dict[str, list[float]], r_one: float, r_sharded: float, same: float
) -> None:
    """The figures docs/scaling.md quotes, on stdout, with the ratios beside them."""
    p_one, p_sh = latency(lat["one"], 3), latency(lat["sharded"], 3)
    best = data["qps_32_clients"]
    print(
        f"recall@3 vs exact: one {r_one:.4f}, sharded {r_sharded:.4f} (same top-3 on {same:.1%} of queries)\n"
        f"1 client p50/p95: one {p_one['p50_ms']}/{p_one['p95_ms']} ms, sharded {p_sh['p50_ms']}/"
        f"{p_sh['p95_ms']} ms (p50 ratio {data['p50_ratio_sharded_over_one']})\n"
        f"32 clients queries/s: threads one {best['threads']['one']} sharded {best['threads']['sharded']}; "
        f"coalesced one {best['coalesced']['one']} sharded {best['coalesced']['sharded']} "
        f"(ratios {data['throughput_ratio_sharded_over_one']})\n"
        f"control, the one store through the sharded code path: p50 {latency(lat['one_via_sharded_path'], 3)['p50_ms']} "
        f"ms, queries/s threads {best['threads']['one_via_sharded_path']} coalesced "
        f"{best['coalesced']['one_via_sharded_path']}\n"
        f"load average before {data['loadavg_before']} after {data['loadavg_after']}"
    )


if __name__ == "__main__":
    main()
