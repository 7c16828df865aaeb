"""Stores of 10k, 100k and 1M passages built from precomputed vectors, measured.

The data: the 4,948 distinct context paragraphs of the HotpotQA 500-question file (``raw/``),
encoded with all-MiniLM-L6-v2, are the first rows; every further row i is drawn around a real
one: v = normalise(e_p + s * g), p a uniformly drawn real paragraph, g an isotropic Gaussian of
expected norm 1, s uniform in [0.5, 1.0], so cos(v, e_p) is 0.71-0.89 and two children of one
parent sit at cosine ~0.5-0.8 (the dense neighbourhoods of a large corpus's near-duplicates).
A row's text is its parent's, its id the row number; rows are drawn per block of 10,000 with
seed (block), so every size is a prefix of the larger ones. Queries: the file's first
``--queries`` questions. What is measured per size: docs/performance.md, "Stores of 10k to 1M
passages". Builds are kept in ``--scratch`` and reused when complete (``home*.build.json``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
from _common import (
    HOTPOT,
    OUT,
    exact_topk,
    gather_limited,
    latency,
    parser,
    pyplot,
    recall,
    require,
    save,
    write,
)
from _server import CLI, cli_env, cli_server
from tqdm import tqdm

DIM = 384
BLOCK = 10_000
K = 3
CLIENTS = 32
PY = sys.executable


def base_data(scratch: Path, n_queries: int) -> tuple[np.ndarray, list[dict], np.ndarray, list[str]]:
    """Real paragraph embeddings and query embeddings (cached in scratch)."""
    d = scratch / "base"
    d.mkdir(parents=True, exist_ok=True)
    recs = json.loads(HOTPOT.read_text())
    questions = [r["question"] for r in recs][:n_queries]
    if not (d / "base.npy").is_file() or not (d / "queries.npy").is_file():
        from parallelsearch.stores import get_embedder, read_passages

        seen: dict[str, dict] = {}
        for p in read_passages([HOTPOT]):
            seen.setdefault(p.id, {"title": p.title, "text": p.text})
        paras = list(seen.values())
        emb = get_embedder()
        vecs = []
        for i in tqdm(range(0, len(paras), 256), desc="encoding the real paragraphs"):
            vecs.append(emb.encode_passages([p["text"] for p in paras[i : i + 256]], batch_size=32))
        np.save(d / "base.npy", np.concatenate(vecs))
        (d / "base.json").write_text(json.dumps(paras))
        np.save(d / "queries.npy", emb.encode_queries(questions))
    base = np.load(d / "base.npy")
    paras = json.loads((d / "base.json").read_text())
    qv = np.load(d / "queries.npy")[:n_queries]
    return base, paras, qv, questions


def block_rows(base: np.ndarray, block: int) -> tuple[np.ndarray, np.ndarray]:
    """Rows [block*BLOCK, (block+1)*BLOCK): real rows first, then rows drawn around them."""
    nb = len(base)
    rng = np.random.default_rng(block)
    idx = np.arange(block * BLOCK, (block + 1) * BLOCK)
    parent = rng.integers(0, nb, size=BLOCK)
    parent[idx < nb] = idx[idx < nb]
    g = rng.standard_normal((BLOCK, DIM)).astype(np.float32) / np.sqrt(DIM)
    s = rng.uniform(0.5, 1.0, size=(BLOCK, 1)).astype(np.float32)
    s[idx < nb] = 0.0
    v = base[parent] + s * g
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    return v.astype(np.float32), parent


def make_data(d: Path, n: int, base: np.ndarray, paras: list[dict]) -> tuple[Path, Path]:
    vec_path, corpus_path = d / "vectors.npy", d / "corpus.jsonl"
    done = d / "data.done"
    if done.is_file():
        return vec_path, corpus_path
    d.mkdir(parents=True, exist_ok=True)
    mm = np.lib.format.open_memmap(vec_path, mode="w+", dtype=np.float32, shape=(n, DIM))
    with corpus_path.open("w") as f:
        for b in tqdm(range(-(-n // BLOCK)), desc=f"drawing {n:,} vectors"):
            v, parent = block_rows(base, b)
            lo, hi = b * BLOCK, min(n, (b + 1) * BLOCK)
            mm[lo:hi] = v[: hi - lo]
            for i in range(lo, hi):
                p = paras[parent[i - lo]]
                f.write(json.dumps({"id": str(i), "title": p["title"], "text": p["text"]}) + "\n")
    mm.flush()
    del mm
    done.write_text("ok")
    return vec_path, corpus_path


def run_child(cmd: list[str], env: dict[str, str]) -> tuple[float, float, str]:
    """Run ``cmd``; (seconds, peak RSS in GiB, stdout). The child's stderr (progress) passes through."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, cwd=env["PARALLELSEARCH_HOME"], stdout=subprocess.PIPE, text=True)
    out = proc.stdout.read() if proc.stdout else ""
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    secs = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed with exit code {proc.returncode}: {out[-2000:]}")
    return secs, usage.ru_maxrss / 2**20, out


def graph_tag(hnsw: dict[str, int]) -> str:
    """Folder suffix of a store built with non-default HNSW parameters ("" for Chroma's defaults)."""
    return "".join(f"-{k}{v}" for k, v in sorted(hnsw.items()))


def build(home: Path, n: int, vec_path: Path, corpus_path: Path, hnsw: dict[str, int]) -> dict:
    """Build (or reuse) the store of ``n`` rows in ``home``, with the given HNSW build parameters."""
    info = home.with_name(home.name + ".build.json")
    legacy = home.with_name("build.json")  # scratch from before the HNSW flags: the default graph's record
    if not hnsw and not info.is_file() and legacy.is_file():
        legacy.rename(info)
    if info.is_file():
        return json.loads(info.read_text())
    if home.exists():
        shutil.rmtree(home)
    cmd = [*CLI, "index", "--store", store_name(n), "--vectors", str(vec_path), str(corpus_path)]
    for key, value in hnsw.items():
        cmd += [f"--{key.replace('_', '-')}", str(value)]
    secs, rss, out = run_child(cmd, cli_env(home))
    print(out.strip())
    disk = sum(f.stat().st_size for f in (home / "chroma").rglob("*") if f.is_file())
    res = {
        "n": n,
        "hnsw_build": hnsw,
        "ingest_s": round(secs, 1),
        "ingest_vectors_per_s": round(n / secs, 1),
        "ingest_peak_rss_gib": round(rss, 2),
        "disk_gib": round(disk / 2**30, 3),
        "cli_summary": out.strip(),
    }
    info.write_text(json.dumps(res, indent=2))
    return res


def store_name(n: int) -> str:
    return f"scale-{n}"


def one_then_many(
    fn: Callable, items: list, reps: int, many: Callable[[list], list[float]] | None = None
) -> tuple[list, dict]:
    """``reps`` passes over ``items`` from 1 client, then all the passes at once from ``CLIENTS``
    (threads calling ``fn``, or ``many(items)`` returning latencies): (the last pass's results,
    ``{"c1", "c32"}`` latencies in ms)."""

    def timed(item: object) -> tuple[object, float]:
        t0 = time.perf_counter()
        return fn(item), (time.perf_counter() - t0) * 1000

    lat1: list[float] = []
    for _ in range(reps):
        with ThreadPoolExecutor(1) as pool:
            pairs = list(pool.map(timed, items))
        lat1 += [ms for _, ms in pairs]
    if many is None:
        with ThreadPoolExecutor(CLIENTS) as pool:
            lat32 = [ms for _, ms in pool.map(timed, items * reps)]
    else:
        lat32 = many(items * reps)
    return [r for r, _ in pairs], {"c1": latency(lat1, 2), "c32": latency(lat32, 2)}


def store_worker(home: str, name: str, qpath: str, reps: int) -> None:
    """Child: open the store (fresh process, so its recorded ef_search applies), time queries."""
    from parallelsearch.stores import ChromaStore
    from parallelsearch.stores.chroma_store import hnsw_of
    from parallelsearch.stores.ingestion.vectors import RecordedModel

    qv = np.load(qpath)
    t0 = time.perf_counter()
    store = ChromaStore(
        name, path=Path(home) / "chroma", embedder=RecordedModel("all-MiniLM-L6-v2", DIM), create=False
    )
    store.search_vectors(qv[:1], K)  # loads the index
    load_s = time.perf_counter() - t0
    items = [qv[i : i + 1] for i in range(len(qv))]
    store.search_vectors(qv[:8], K)  # warm
    ids, columns = one_then_many(lambda q: store.search_vectors(q, K)[0], items, reps)
    out = {"load_s": round(load_s, 2), "hnsw": hnsw_of(store.collection), **columns}
    out["ids"] = [[p.id for p in hits] for hits in ids]
    out["peak_rss_gib"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 2)
    print("RESULT " + json.dumps(out))


def measure_store(home: Path, n: int, qpath: Path, exact: np.ndarray, reps: int) -> dict:
    cmd = [PY, __file__, "--store-worker", str(home), store_name(n), str(qpath), str(reps)]
    _, rss, out = run_child(cmd, cli_env(home))
    res = json.loads(next(line for line in out.splitlines() if line.startswith("RESULT "))[7:])
    res["recall@3"] = round(recall(res.pop("ids"), exact), 4)
    return res


def set_ef(home: Path, n: int, ef: int) -> None:
    cmd = [*CLI, "stores", "--store", store_name(n), "--set-ef-search", str(ef)]
    run_child(cmd, cli_env(home))


def measure_retrieve(home: Path, n: int, questions: list[str], exact: np.ndarray, reps: int) -> dict:
    import httpx

    args = ("serve-retriever", "--store", store_name(n))
    with cli_server(*args, env=cli_env(home), start_timeout_s=300) as server:
        url = server.url + "/retrieve"
        with httpx.Client() as c:

            def one(q: str) -> list[str]:
                r = c.post(url, json={"queries": [q], "topk": K}, timeout=900)
                r.raise_for_status()
                return [doc["id"] for doc in r.json()["result"][0]]

            for q in questions[:8]:
                one(q)

            async def many(qs: list[str]) -> list[float]:
                async with httpx.AsyncClient(limits=httpx.Limits(max_connections=CLIENTS)) as ac:

                    async def go(q: str) -> None:
                        (await ac.post(url, json={"queries": [q], "topk": K}, timeout=900)).raise_for_status()

                    return (await gather_limited(go, qs, CLIENTS))[1]

            ids, columns = one_then_many(one, questions, reps, lambda qs: asyncio.run(many(qs)))
        try:  # psutil is not a dependency of ours: without it the RSS is not known
            import psutil

            rss = round(psutil.Process(server.proc.pid).memory_info().rss / 2**30, 2)
        except ImportError:
            rss = None
        return {**columns, "recall@3": round(recall(ids, exact), 4), "server_rss_gib": rss}


def measure_faiss(vec_path: Path, qv: np.ndarray, exact: np.ndarray, reps: int) -> dict:
    from parallelsearch.stores.ingestion.vector_files import import_faiss

    faiss = import_faiss()
    mm = np.load(vec_path, mmap_mode="r")
    index = faiss.IndexFlatIP(DIM)
    for lo in range(0, len(mm), 100_000):
        index.add(np.ascontiguousarray(mm[lo : lo + 100_000]))
    q = np.ascontiguousarray(qv / np.linalg.norm(qv, axis=1, keepdims=True), dtype=np.float32)
    items = [q[i : i + 1] for i in range(len(q))]
    index.search(q[:8], K)
    res, columns = one_then_many(lambda x: index.search(x, K)[1][0], items, reps)
    got = [[str(i) for i in r] for r in res]
    index.reset()  # frees the vectors before the next size
    return {**columns, "recall@3": round(recall(got, exact), 4)}


def plot(rows: list[dict], sweep: list[dict], path: Path) -> Path | None:
    if (plt := pyplot()) is None:
        return None
    ns = [r["n"] for r in rows]
    fig, ax = plt.subplots(1, 3 if sweep else 2, figsize=(15 if sweep else 10, 4))
    ax[0].loglog(ns, [r["store"]["c1"]["p50_ms"] for r in rows], "o-", label="store API p50, 1 client")
    ax[0].loglog(ns, [r["store"]["c32"]["p50_ms"] for r in rows], "o--", label="store API p50, 32 clients")
    if all(r.get("retrieve") for r in rows):
        ax[0].loglog(ns, [r["retrieve"]["c1"]["p50_ms"] for r in rows], "s-", label="/retrieve p50, 1 client")
    ax[0].loglog(ns, [r["faiss"]["c1"]["p50_ms"] for r in rows], "^-", label="FAISS flat p50, 1 client")
    ax[0].set_xlabel("passages")
    ax[0].set_ylabel("ms")
    ax[0].legend(fontsize=7)
    ax[1].loglog(ns, [r["ingest_peak_rss_gib"] for r in rows], "o-", label="ingest peak RSS (GiB)")
    ax[1].loglog(ns, [r["disk_gib"] for r in rows], "s-", label="disk (GiB)")
    ax[1].loglog(ns, [r["ingest_s"] / 60 for r in rows], "^-", label="ingest time (min)")
    ax[1].set_xlabel("passages")
    ax[1].legend(fontsize=7)
    if sweep:
        ax[2].plot([s["store"]["c1"]["p50_ms"] for s in sweep], [s["store"]["recall@3"] for s in sweep], "o-")
        for s in sweep:
            ax[2].annotate(
                f"ef={s['ef_search']}", (s["store"]["c1"]["p50_ms"], s["store"]["recall@3"]), fontsize=7
            )
        ax[2].set_xlabel(f"store API p50 ms at {rows[-1]['n']:,} (1 client)")
        ax[2].set_ylabel("recall@3 vs exact")
    return save(fig, path)


def goals_at_largest(big: dict, sweep: list[dict]) -> dict:
    """The goals at the largest size: at the store's own ef_search, and at the smallest
    swept ef_search that meets recall@3 >= 0.97 with p50 <= 10 ms (what to set with
    ``parallelsearch stores --store NAME --set-ef-search V``)."""
    rss_ok = max(big["ingest_peak_rss_gib"], big["store"]["peak_rss_gib"]) < 8
    goals: dict = {
        "n": big["n"],
        "hnsw": big["store"]["hnsw"],
        "recall@3 >= 0.97": big["store"]["recall@3"] >= 0.97,
        "store API p50 <= 10 ms": big["store"]["c1"]["p50_ms"] <= 10,
        "peak RSS < 8 GiB (ingest, store API process)": rss_ok,
    }
    meeting = [s for s in sweep if s["store"]["recall@3"] >= 0.97 and s["store"]["c1"]["p50_ms"] <= 10]
    if meeting:
        best = min(meeting, key=lambda s: s["ef_search"])
        goals["all met at ef_search"] = {
            "ef_search": best["ef_search"],
            "recall@3": best["store"]["recall@3"],
            "p50_ms": best["store"]["c1"]["p50_ms"],
            "peak RSS < 8 GiB": rss_ok and best["store"]["peak_rss_gib"] < 8,
        }
    return goals


def say(label: str, r: dict, extra: str = "") -> None:
    print(f"  {label}: recall@3 {r['recall@3']}, 1 client {r['c1']}, 32 clients {r['c32']}{extra}")


def parse_args() -> argparse.Namespace:
    """The script's options (``--reps`` at least 1), and the hidden one its store workers get."""
    ap = parser(__doc__)
    ap.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    scratch = Path(os.environ.get("TMPDIR", "/tmp")) / "parallelsearch-scale"
    ap.add_argument(
        "--scratch",
        type=Path,
        default=scratch,
        help="where vectors and stores are built and kept; a complete build (home*.build.json) is reused, "
        "and stores with --max-neighbors/--ef-construction get their own folder beside the default one",
    )
    ap.add_argument("--queries", type=int, default=200, help="HotpotQA questions used as queries")
    ap.add_argument("--reps", type=int, default=2, help="passes over the queries per setting")
    ap.add_argument(
        "--ef-search", type=int, nargs="*", default=[10, 20, 40, 80, 160], help="sweep at the largest size"
    )
    ap.add_argument("--max-neighbors", type=int, help="HNSW M of the built stores (none: Chroma's 16)")
    ap.add_argument(
        "--ef-construction", type=int, help="HNSW ef_construction of the stores (none: Chroma's 100)"
    )
    ap.add_argument("--no-retrieve", action="store_true", help="skip the /retrieve server column")
    ap.add_argument("--build-only", action="store_true", help="build the stores and stop")
    ap.add_argument("--store-worker", nargs=4, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.reps < 1:
        ap.error(f"--reps must be >= 1, got {args.reps}")
    return args


def build_size(d: Path, home: Path, n: int, base, paras, hnsw: dict) -> tuple[dict, Path]:
    """The ``n``-row vectors and store (reused when complete), with the build's figures printed:
    (the size's row, its vectors' file)."""
    vec_path, corpus_path = make_data(d, n, base, paras)
    row = build(home, n, vec_path, corpus_path, hnsw)
    print(
        f"{n:,}: ingest {row['ingest_vectors_per_s']} vectors/s ({row['ingest_s']} s), peak RSS "
        f"{row['ingest_peak_rss_gib']} GiB, disk {row['disk_gib']} GiB"
    )
    return row, vec_path


def measure_size(
    row: dict, args: argparse.Namespace, home: Path, n: int, vec_path: Path, qv, qpath: Path, questions
) -> np.ndarray:
    """The store API, the ``/retrieve`` server and FAISS flat on one size, side by side against
    the exact top 3, into ``row``; the exact top 3, for the ef_search sweep."""
    exact = exact_topk(np.load(vec_path, mmap_mode="r"), qv)
    row["store"] = s = measure_store(home, n, qpath, exact, args.reps)
    say("store API", s, f", load {s['load_s']} s, RSS {s['peak_rss_gib']} GiB")
    if not args.no_retrieve:
        row["retrieve"] = measure_retrieve(home, n, questions, exact, args.reps)
        say("/retrieve (text queries)", row["retrieve"])
    row["faiss"] = measure_faiss(vec_path, qv, exact, args.reps)
    say("FAISS flat", row["faiss"])
    return exact


def sweep_ef_search(home: Path, n: int, qpath: Path, exact, efs: list[int], default_ef: int) -> list[dict]:
    """The store API at each ``ef_search`` (recall against latency), then the store's own set back."""
    sweep: list[dict] = []
    for ef in tqdm(efs, desc=f"ef_search sweep at {n:,}"):
        set_ef(home, n, ef)
        res = measure_store(home, n, qpath, exact, 1)
        sweep.append({"ef_search": ef, "store": res})
        say(f"ef_search {ef}", res)
    set_ef(home, n, default_ef)
    return sweep


def main() -> dict:
    """Every size built and measured, the ef_search sweep at the largest; figures written and plotted."""
    args = parse_args()
    if args.store_worker:
        home, name, qpath, reps = args.store_worker
        store_worker(home, name, qpath, int(reps))
        return {}
    require(HOTPOT)
    args.scratch.mkdir(parents=True, exist_ok=True)
    base, paras, qv, questions = base_data(args.scratch, args.queries)
    qpath = args.scratch / "base" / f"queries-{len(qv)}.npy"
    np.save(qpath, qv)
    rows: list[dict] = []
    sweep: list[dict] = []
    hnsw = {k: getattr(args, k) for k in ("max_neighbors", "ef_construction") if getattr(args, k) is not None}
    result_name = "scale" + graph_tag(hnsw).replace("-", "_")  # scale.json for Chroma's default graph
    for n in sorted(args.sizes):
        d = args.scratch / str(n)
        home = d / f"home{graph_tag(hnsw)}"
        row, vec_path = build_size(d, home, n, base, paras, hnsw)
        if args.build_only:
            rows.append(row)
            continue
        exact = measure_size(row, args, home, n, vec_path, qv, qpath, questions)
        rows.append(row)
        if n == max(args.sizes) and args.ef_search:
            default_ef = row["store"]["hnsw"].get("ef_search", 100)
            sweep += sweep_ef_search(home, n, qpath, exact, args.ef_search, default_ef)
    result = {
        "k": K,
        "clients": CLIENTS,
        "queries": len(qv),
        "dimension": DIM,
        "sizes": rows,
        "ef_sweep": sweep,
    }
    if not args.build_only and rows:
        result["plot"] = str(plot(rows, sweep, OUT / f"{result_name}.png"))
        result["goals_at_largest"] = goals_at_largest(rows[-1], sweep)
        print(json.dumps(result["goals_at_largest"]))
    return write(result_name, result)


if __name__ == "__main__":
    main()
