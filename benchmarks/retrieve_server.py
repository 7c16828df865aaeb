"""``/retrieve`` server under concurrent load: cross-request batching against one search per
request, and against the bare encoder on the same queries.

Real server processes (``parallelsearch serve-retriever``) on 127.0.0.1 over a store of the
4,948 context paragraphs of the 500 HotpotQA dev questions (not the holdout), queried with
those questions. Variants, interleaved round by round in this one process:

* ``batched``: the default server (``--max-batch 64``): concurrent requests share one
  encoder call and one Chroma query (:mod:`parallelsearch.stores.request_batching`);
* ``unbatched``: ``--max-batch 0``, one ``search_batch`` per request (before issue 14);
* ``official`` (only with ``--official PATH``, a checkout of ParallelSearch/Search-R1): its
  ``search_r1/search/retrieval_server.py`` over a FAISS flat index of the same embeddings.
  It needs ``faiss`` and ``datasets`` importable and a CUDA device: its encoder moves every
  batch to CUDA unconditionally, so on a CPU-only machine this column cannot run;
* the bare encoder, in this process, at batch 1/8/32/64: the store's own encoder
  (``Embedder.encode_queries``) and plain sentence-transformers ``encode``.

Loads: 1 client sending 1 query per request, 1 client with 4 queries per request, 8 and 32
clients with 1 query per request (closed loop). Goals (issue 14): at 8 and 32 clients the
batched server's queries/s >= 0.8x the bare encoder's best batched queries/s; p95 at 8
clients <= 50 ms; 1-client 1-query p50 <= 1.15x the bare batch-1 encoder call.

Usage: ``python benchmarks/retrieve_server.py [--rounds 3] [--backend torch] [--official PATH]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
from _common import HOTPOT, ROOT, plot_bars, write
from tqdm import tqdm

from parallelsearch.loopback import free_port

LOADS = {  # name: (clients, queries per request, requests per client)
    "1c_1q": (1, 1, 120),
    "1c_4q": (1, 4, 60),
    "8c_1q": (8, 1, 40),
    "32c_1q": (32, 1, 16),
}
BATCHES = (1, 8, 32, 64)


def pct(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(round(q * (len(s) - 1))))]


def build_store(home: Path, backend: str) -> Path:
    """The HotpotQA paragraphs indexed through the CLI (as a user would), under ``home``.

    An fp32 store is indexed with ONNX fp32, the same embeddings as torch's (to 1e-5), because
    on a shared 2-core machine torch's two spinning OpenMP threads index far slower."""
    cmd = [str(Path(sys.executable).parent / "parallelsearch"), "index", str(HOTPOT), "--store", "hotpot500"]
    cmd += ["--encoder-backend", backend]
    subprocess.run(cmd, check=True, env={**os.environ, "PARALLELSEARCH_HOME": str(home)}, timeout=1800)
    return home


class Server:
    """One ``serve-retriever`` process on 127.0.0.1 (stopped on exit)."""

    def __init__(self, home: Path, extra: list[str], backend: str) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        cmd = [str(Path(sys.executable).parent / "parallelsearch"), "serve-retriever", "--store", "hotpot500"]
        cmd += ["--port", str(self.port), *extra, "--encoder-backend", backend]
        self.cmd, self.env = cmd, {**os.environ, "PARALLELSEARCH_HOME": str(home)}

    def __enter__(self) -> Server:
        self.proc = subprocess.Popen(
            self.cmd, env=self.env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
        )
        wait_healthy(self.url, self.proc)
        return self

    def __exit__(self, *exc) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=30)


def wait_healthy(url: str, proc: subprocess.Popen, timeout_s: float = 300) -> None:
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(
                f"server {url} exited: {proc.stderr.read().decode()[-2000:] if proc.stderr else ''}"
            )
        try:
            if httpx.get(url + "/health", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    raise RuntimeError(f"server {url} not healthy within {timeout_s} s")


class OfficialServer:
    """The official retrieval_server.py of a ParallelSearch/Search-R1 checkout, same embeddings."""

    def __init__(self, checkout: Path, home: Path, model_path: str) -> None:
        self.script = checkout / "search_r1" / "search" / "retrieval_server.py"
        if not self.script.is_file():
            sys.exit(f"--official: {self.script} does not exist")
        try:
            import faiss  # noqa: F401
        except ImportError:
            sys.exit("--official needs faiss (pip install faiss-cpu) to build the flat index it serves")
        self.home, self.model_path = home, model_path
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"  # the official script binds 0.0.0.0:--port

    def __enter__(self) -> OfficialServer:
        import faiss
        import numpy as np

        from parallelsearch.stores import ChromaStore

        store = ChromaStore("hotpot500", path=self.home / "chroma", create=False)
        got = store.collection.get(include=["embeddings", "documents", "metadatas"])
        work = Path(tempfile.mkdtemp())
        with (work / "corpus.jsonl").open("w") as f:
            for i, d, m in zip(got["ids"], got["documents"], got["metadatas"], strict=True):
                f.write(json.dumps({"id": i, "contents": f'"{(m or {}).get("title", "")}"\n{d}'}) + "\n")
        index = faiss.IndexFlatIP(store.embedder.dimension)
        index.add(np.asarray(got["embeddings"], dtype=np.float32))
        faiss.write_index(index, str(work / "flat.index"))
        cmd = [sys.executable, str(self.script), "--index_path", str(work / "flat.index")]
        cmd += ["--corpus_path", str(work / "corpus.jsonl"), "--topk", "3", "--retriever_name", "minilm"]
        cmd += ["--retriever_model", self.model_path, "--port", str(self.port)]  # it mean-pools
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        wait_healthy_post(self.url, self.proc)
        return self

    def __exit__(self, *exc) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=30)


def wait_healthy_post(url: str, proc: subprocess.Popen, timeout_s: float = 600) -> None:
    """The official server has no /health: wait until /retrieve answers."""
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(
                f"official server exited: {proc.stderr.read().decode()[-2000:] if proc.stderr else ''}"
            )
        try:
            if (
                httpx.post(url + "/retrieve", json={"queries": ["x"], "topk": 1}, timeout=5).status_code
                == 200
            ):
                return
        except httpx.HTTPError:
            pass
        time.sleep(1)
    raise RuntimeError(f"official server {url} not answering within {timeout_s} s")


async def load(url: str, clients: int, per_request: int, requests_each: int, queries: list[str]) -> dict:
    """Closed-loop clients; every request's latency; queries/s over the whole run."""
    lat: list[float] = []
    errors = 0
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(timeout=60, limits=limits) as client:

        async def one_client(c: int) -> None:
            nonlocal errors
            for r in range(requests_each):
                start = (c * requests_each + r) * per_request
                qs = [queries[(start + j) % len(queries)] for j in range(per_request)]
                t0 = time.perf_counter()
                resp = await client.post(url + "/retrieve", json={"queries": qs, "topk": 3})
                lat.append((time.perf_counter() - t0) * 1000)
                errors += resp.status_code != 200

        t0 = time.perf_counter()
        await asyncio.gather(*(one_client(c) for c in range(clients)))
        wall = time.perf_counter() - t0
    n = clients * requests_each
    return {
        "requests_per_s": n / wall,
        "queries_per_s": n * per_request / wall,
        "p50_ms": pct(lat, 0.5),
        "p95_ms": pct(lat, 0.95),
        "errors": errors,
    }


def bare_encoder_rows(encoders: dict, queries: list[str]) -> dict:
    """queries/s and median ms per call of each encoder at each batch size (one block each)."""
    out: dict = {}
    for name, fn in encoders.items():
        for b in BATCHES:
            fn(queries[:b])  # warm-up
            times = []
            n_calls = max(3, 48 // b)
            for i in range(n_calls):
                chunk = [queries[(i * b + j) % len(queries)] for j in range(b)]
                t0 = time.perf_counter()
                fn(chunk)
                times.append(time.perf_counter() - t0)
            med = statistics.median(times)
            out.setdefault(name, {})[b] = {"ms": med * 1000, "queries_per_s": b / med}
    return out


def median_rows(samples: list[dict]) -> dict:
    return {k: statistics.median(s[k] for s in samples) for k in samples[0]}


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--backend", help="encoder backend of the store and servers (default: the default)")
    ap.add_argument("--official", type=Path, help="a ParallelSearch/Search-R1 checkout (optional column)")
    ap.add_argument("--reuse", type=Path, help="the folder a previous run printed (skips indexing)")
    args = ap.parse_args(argv)
    if not HOTPOT.is_file():
        sys.exit(f"benchmark data {HOTPOT} is missing")
    from sentence_transformers import SentenceTransformer

    from parallelsearch.stores.embedders import DEFAULT_MODEL, Embedder, resolve_model_path

    recs = json.loads(HOTPOT.read_text())
    queries = [r["question"] for r in recs]
    backend = args.backend or "torch"
    if args.reuse:
        home = args.reuse
    else:
        home = Path(tempfile.mkdtemp(prefix="retrieve-server-"))
        print(f"indexing {HOTPOT.name} into {home} ...")
        build_store(home / "a", "onnx-int8" if backend == "onnx-int8" else "onnx")
        shutil.copytree(home / "a", home / "b")  # an embedded store is one process's: one copy each
    ours = Embedder(DEFAULT_MODEL, backend=backend, cache_dir=home / "a" / "models")
    plain = SentenceTransformer(resolve_model_path(DEFAULT_MODEL), device="cpu")
    encoders = {
        f"store encoder ({ours.backend})": ours.encode_queries,
        "sentence-transformers encode": lambda qs: plain.encode(
            qs, normalize_embeddings=True, convert_to_numpy=True, show_progress_bar=False
        ),
    }
    servers = {
        "batched": Server(home / "a", ["--max-batch", "64"], backend),
        "unbatched": Server(home / "b", ["--max-batch", "0"], backend),
    }
    if args.official:
        servers["official"] = OfficialServer(args.official, home / "a", resolve_model_path(DEFAULT_MODEL))
    samples: dict[str, dict[str, list[dict]]] = {v: {k: [] for k in LOADS} for v in servers}
    enc_samples: list[dict] = []
    with servers["batched"], servers["unbatched"]:
        for v in servers.values():
            if isinstance(v, Server):
                asyncio.run(load(v.url, 4, 1, 8, queries))  # warm-up
        for _ in tqdm(range(args.rounds), desc="rounds"):
            enc_samples.append(bare_encoder_rows(encoders, queries))
            for name, srv in servers.items():
                if name == "official":
                    srv.__enter__()
                try:
                    for lname, (c, per, each) in LOADS.items():
                        samples[name][lname].append(asyncio.run(load(srv.url, c, per, each, queries)))
                finally:
                    if name == "official":
                        srv.__exit__(None, None, None)
    enc = {name: {b: median_rows([s[name][b] for s in enc_samples]) for b in BATCHES} for name in encoders}
    rows = {v: {lname: median_rows(s) for lname, s in per.items()} for v, per in samples.items()}
    return report(args, enc, rows, encoders)


def report(args, enc: dict, rows: dict, encoders: dict) -> dict:
    store_enc = next(iter(encoders))
    for name, per_b in enc.items():
        print(
            f"bare {name}: "
            + ", ".join(
                f"batch {b} {r['queries_per_s']:.0f} q/s ({r['ms']:.1f} ms)" for b, r in per_b.items()
            )
        )
    for v, per in rows.items():
        for lname, r in per.items():
            print(
                f"{v:9s} {lname:6s}: {r['requests_per_s']:6.1f} req/s, {r['queries_per_s']:6.1f} queries/s, "
                f"p50 {r['p50_ms']:6.1f} ms, p95 {r['p95_ms']:6.1f} ms, errors {r['errors']:.0f}"
            )
    goals: dict = {}
    b = rows["batched"]
    for name in encoders:
        best = max(r["queries_per_s"] for r in enc[name].values())
        batch1 = enc[name][1]["ms"]
        g = {
            "best_batched_queries_per_s": best,
            "8c_over_best": b["8c_1q"]["queries_per_s"] / best,
            "32c_over_best": b["32c_1q"]["queries_per_s"] / best,
            "unbatched_8c_over_best": rows["unbatched"]["8c_1q"]["queries_per_s"] / best,
            "unbatched_32c_over_best": rows["unbatched"]["32c_1q"]["queries_per_s"] / best,
            "1c_p50_over_batch1": b["1c_1q"]["p50_ms"] / batch1,
        }
        goals[name] = g
        print(
            f"against bare {name}: 8 clients {g['8c_over_best']:.2f}x, 32 clients {g['32c_over_best']:.2f}x of its "
            f"best {best:.0f} q/s (goal >= 0.8; unbatched {g['unbatched_8c_over_best']:.2f}x / "
            f"{g['unbatched_32c_over_best']:.2f}x); 1-client p50 {g['1c_p50_over_batch1']:.2f}x its batch-1 call "
            "(goal <= 1.15)"
        )
    print(f"p95 at 8 clients: {b['8c_1q']['p95_ms']:.1f} ms (goal <= 50)")
    for v in rows:
        if v != "batched":
            print(
                f"batched / {v}: "
                + ", ".join(
                    f"{ln} {b[ln]['queries_per_s'] / rows[v][ln]['queries_per_s']:.2f}x" for ln in LOADS
                )
            )
    data = {
        "rounds": args.rounds,
        "backend": args.backend,
        "store_encoder": store_enc,
        "loads": {
            k: {"clients": c, "queries_per_request": p, "requests_per_client": e}
            for k, (c, p, e) in LOADS.items()
        },
        "bare_encoder": {
            n: {str(k): {kk: round(vv, 2) for kk, vv in r.items()} for k, r in per.items()}
            for n, per in enc.items()
        },
        "servers": {
            v: {ln: {k: round(x, 2) for k, x in r.items()} for ln, r in per.items()}
            for v, per in rows.items()
        },
        "goals": {n: {k: round(x, 3) for k, x in g.items()} for n, g in goals.items()},
        "p95_8c_ms": round(b["8c_1q"]["p95_ms"], 1),
    }
    suffix = f"_{args.backend}" if args.backend else ""
    write(f"retrieve_server{suffix}", data)
    best = goals[store_enc]["best_batched_queries_per_s"]
    plot_bars(
        ROOT / "docs" / "img" / f"retrieve_server{suffix}.png",
        f"/retrieve queries/s by load ({store_enc}; bare encoder best {best:.0f} q/s)",
        {ln: {v: rows[v][ln]["queries_per_s"] for v in rows} for ln in LOADS},
        "queries/s",
        hline=(0.8 * best, "0.8x bare encoder best (goal at 8/32 clients)"),
    )
    return data


if __name__ == "__main__":
    main()
