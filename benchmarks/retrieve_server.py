"""``/retrieve`` server under concurrent load: cross-request batching against one search per
request, and against the bare encoder on the same queries.

Real server processes (``parallelsearch serve-retriever``) on 127.0.0.1 over a store of the
4,948 context paragraphs of the 500 HotpotQA dev questions (not the holdout), queried with
those questions. Variants, interleaved round by round in this one process:

* ``batched``: the default server (``--max-batch 64``): concurrent requests share one
  encoder call and one Chroma query (:mod:`parallelsearch.stores.request_batching`). With
  the default engine (ONNX fp32 on CPU) it runs one encoder thread per core, a batch split
  over them; with ``--backend torch``, one encoder thread with torch's team;
* ``unbatched``: ``--max-batch 0``, one ``search_batch`` per request (before issue 14);
* the other thread arrangement (:data:`OTHER_ARRANGEMENT`): with torch, ``--encoder-workers 2
  --encoder-threads 1`` (two batches at once, each split over the two encoder threads); with
  ONNX, ``--encoder-workers 1`` (one encoder thread, one core, as before the default changed);
* ``official`` (only with ``--official PATH``, a checkout of ParallelSearch/Search-R1; never
  vendored or downloaded): its ``search_r1/search/retrieval_server.py``, run unmodified from
  the checkout, over a FAISS flat index of the same embeddings (it needs ``faiss`` and
  ``datasets``: ``pip install faiss-cpu datasets``). Without CUDA it runs through
  :func:`run_official_on_cpu`, which turns its unconditional ``.cuda()`` calls into no-ops
  and keeps the model fp32 (it asks for fp16). Before the rounds, the two servers' top-3
  ids are compared (same embeddings; HNSW against exact search);
* the bare encoder at batch 1/8/32/64, each kind alone in its own child process
  (:func:`bare_encoder_child`): the store's own encoder (``Embedder.encode_queries``) on one
  encoder thread and on 2 threads x 1 (the batch split over both, running at once), and
  plain sentence-transformers ``encode`` (the issue's reference column). The goals are read
  against each, and against the best of them.

Every load also records the CPU time the server process and this process (the clients)
spent per query, so the report prints each server's CPU ceiling (cores / CPU per query) and
how much of it was reached: what is left is CPU idle between batches, not cost.

The clients are a lean raw HTTP/1.1 client (:mod:`_raw_http`, ~0.1 ms of CPU per request;
``--client httpx`` for httpx's ``AsyncClient``, 0.9-1.7 ms): on 2 cores, every millisecond
the load generator spends is taken from the server it measures, and in RL the clients
(rollout workers) run elsewhere.

Loads: 1 client sending 1 query per request, 1 client with 4 queries per request, 8 and 32
clients with 1 query per request (closed loop). Goals (issue 14): at 8 and 32 clients the
batched server's queries/s >= 0.8x the bare encoder's best batched queries/s; p95 at 8
clients <= 50 ms; 1-client 1-query p50 <= 1.15x the bare batch-1 encoder call.

Usage: ``python benchmarks/retrieve_server.py [--rounds 3] [--backend torch|onnx] [--official PATH]``
(no ``--backend``: the default engine, ``auto``; figures go to ``retrieve_server.json``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import httpx
from _common import HOTPOT, ROOT, fmt, percentile, plot_bars, write
from _raw_http import RawHttpConnection, RawHttpError
from _server import ServerProcess
from tqdm import tqdm

from parallelsearch.loopback import free_port

LOADS = {  # name: (clients, queries per request, requests per client)
    "1c_1q": (1, 1, 120),
    "1c_4q": (1, 4, 60),
    "8c_1q": (8, 1, 40),
    "32c_1q": (32, 1, 16),
}
BATCHES = (1, 2, 4, 8, 32, 64)
NO_ENCODER = "no encoder (HTTP path only)"
POOL = (2, 1)  # the pooled bare encoder and torch's other server: encoder threads x OpenMP threads each
#: each engine's server that is not the default arrangement: (variant name, serve-retriever flags)
OTHER_ARRANGEMENT = {
    "torch": (
        f"batched, {POOL[0]} encoder threads x {POOL[1]}",
        ["--encoder-workers", str(POOL[0]), "--encoder-threads", str(POOL[1])],
    ),
    "onnx": ("batched, 1 encoder thread", ["--encoder-workers", "1"]),
}


def hotpot_questions() -> list[str]:
    """The 500 HotpotQA dev questions the store's paragraphs come from (the benchmark's queries)."""
    return [r["question"] for r in json.loads(HOTPOT.read_text())]


def build_store(home: Path, backend: str) -> Path:
    """The HotpotQA paragraphs indexed through the CLI (as a user would), under ``home``.

    An fp32 store is indexed with ONNX fp32, the same embeddings as torch's (to 1e-5), because
    on a shared 2-core machine torch's two spinning OpenMP threads index far slower."""
    cmd = [str(Path(sys.executable).parent / "parallelsearch"), "index", str(HOTPOT), "--store", "hotpot500"]
    cmd += ["--encoder-backend", backend]
    subprocess.run(cmd, check=True, env={**os.environ, "PARALLELSEARCH_HOME": str(home)}, timeout=1800)
    return home


class Server(ServerProcess):
    """One ``serve-retriever`` process on 127.0.0.1 (stopped on exit)."""

    def __init__(self, home: Path, extra: list[str], backend: str) -> None:
        port = free_port()
        cmd = [str(Path(sys.executable).parent / "parallelsearch"), "serve-retriever", "--store", "hotpot500"]
        cmd += ["--port", str(port), *extra, "--encoder-backend", backend]
        super().__init__(
            cmd, env={**os.environ, "PARALLELSEARCH_HOME": str(home)}, port=port, start_timeout_s=300
        )


class NoEncoderServer(ServerProcess):
    """The same ``/retrieve`` app (batching, body guard, JSON) over a stand-in searcher that
    returns three fixed passages at once: what the HTTP path costs with no encoder and no
    Chroma, i.e. the part of every request that batching cannot share."""

    def __init__(self) -> None:
        port = free_port()
        cmd = [sys.executable, str(Path(__file__).resolve()), "--no-encoder-server", str(port)]
        super().__init__(cmd, env=dict(os.environ), port=port, start_timeout_s=300)


def serve_no_encoder(port: int) -> None:
    """Child process of :class:`NoEncoderServer` (a benchmark stand-in, never a product path)."""
    import uvicorn

    from parallelsearch.stores import create_retrieval_app
    from parallelsearch.stores.passages import Passage

    para = "A paragraph-sized passage of the kind HotpotQA stores hold. " * 6
    fixed = [Passage(id=f"p{i}", title=f"Title {i}", text=para, score=0.5) for i in range(3)]

    class FixedPassages:
        name = "no-encoder stand-in"

        def search_batch(self, queries, k=3):
            return [fixed[:k] for _ in queries]

        def count(self) -> int:
            return len(fixed)

    app = create_retrieval_app(FixedPassages())
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", timeout_keep_alive=30)


def chroma_query_ms(store, queries: list[str]) -> dict:
    """The store's own Chroma query (precomputed query vectors) at batch 1, 4 and 8, median ms,
    on a copy of the store opened in this process."""
    embedder = store.embedder
    out = {}
    for b in (1, 4, 8):
        vecs = [embedder.encode_queries(queries[i : i + b]) for i in range(0, 24 * b, b)]
        store.search_vectors(vecs[0], 3)
        times = []
        for v in vecs:
            t0 = time.perf_counter()
            store.search_vectors(v, 3)
            times.append(time.perf_counter() - t0)
        out[b] = statistics.median(times) * 1000
    return out


class OfficialServer(ServerProcess):
    """The official retrieval_server.py of a ParallelSearch/Search-R1 checkout, same embeddings."""

    def __init__(self, checkout: Path, home: Path, model_path: str) -> None:
        self.script = checkout / "search_r1" / "search" / "retrieval_server.py"
        if not self.script.is_file():
            sys.exit(f"--official: {self.script} does not exist")
        for module, pip in (("faiss", "faiss-cpu"), ("datasets", "datasets")):
            try:
                __import__(module)
            except ImportError:
                sys.exit(f"--official needs {module} (pip install {pip}): the official server imports it")
        self.home, self.model_path = home, model_path
        self._work: tempfile.TemporaryDirectory | None = None
        # the official script binds 0.0.0.0:--port and has no /health: ready once /retrieve answers
        body = {"queries": ["x"], "topk": 1, "return_scores": True}
        probe = lambda: httpx.post(self.url + "/retrieve", json=body, timeout=5)  # noqa: E731
        super().__init__(
            [],
            env=dict(os.environ),
            port=free_port(),
            probe=probe,
            start_timeout_s=600,
            name="official server",
        )

    def _files(self) -> Path:
        """Its corpus and FAISS flat index, from the store's own embeddings (written once; the
        server is started again every round)."""
        if self._work is None:
            import faiss
            import numpy as np

            from parallelsearch.stores import ChromaStore

            store = ChromaStore("hotpot500", path=self.home / "chroma", create=False)
            got = store.collection.get(include=["embeddings", "documents", "metadatas"])
            self._work = tempfile.TemporaryDirectory(prefix="official-retriever-")
            work = Path(self._work.name)
            with (work / "corpus.jsonl").open("w") as f:
                for i, d, m in zip(got["ids"], got["documents"], got["metadatas"], strict=True):
                    f.write(json.dumps({"id": i, "contents": f'"{(m or {}).get("title", "")}"\n{d}'}) + "\n")
            index = faiss.IndexFlatIP(store.embedder.dimension)
            index.add(np.asarray(got["embeddings"], dtype=np.float32))
            faiss.write_index(index, str(work / "flat.index"))
        return Path(self._work.name)

    def start(self) -> OfficialServer:
        work = self._files()
        cmd = [sys.executable, str(self.script)]
        if not torch_has_cuda():
            cmd = [sys.executable, str(Path(__file__).resolve()), "--official-on-cpu", str(self.script)]
        cmd += ["--index_path", str(work / "flat.index")]
        cmd += ["--corpus_path", str(work / "corpus.jsonl"), "--topk", "3", "--retriever_name", "minilm"]
        self.cmd = cmd + ["--retriever_model", self.model_path, "--port", str(self.port)]  # it mean-pools
        super().start()
        return self


def top_k_agreement(url_a: str, url_b: str, queries: list[str]) -> float:
    """Share of top-3 ids two servers have in common over ``queries`` (same embeddings: the
    difference is HNSW against exact search)."""

    def ids(url: str) -> list[set[str]]:
        r = httpx.post(
            url + "/retrieve", json={"queries": queries, "topk": 3, "return_scores": True}, timeout=120
        )
        r.raise_for_status()
        return [{d["document"]["id"] for d in docs} for docs in r.json()["result"]]

    a, b = ids(url_a), ids(url_b)
    return sum(len(x & y) for x, y in zip(a, b, strict=True)) / (3 * len(queries))


def torch_has_cuda() -> bool:
    import torch

    return torch.cuda.is_available()


def run_official_on_cpu(script: str, argv: list[str]) -> None:
    """Child: the checkout's ``retrieval_server.py`` on a machine without CUDA.

    Its encoder calls ``.cuda()`` on the model and on every batch and switches the model to
    fp16 unconditionally. Here ``.cuda()`` returns the tensor or module unchanged,
    ``torch.cuda.empty_cache()`` does nothing and ``.half()`` keeps fp32 (FAISS flat, fp32: the
    issue's official column); the script itself runs unmodified from the checkout."""
    import runpy

    import torch

    torch.Tensor.cuda = lambda self, *a, **k: self  # type: ignore[method-assign]
    torch.nn.Module.cuda = lambda self, *a, **k: self  # type: ignore[method-assign]
    torch.nn.Module.half = lambda self: self  # type: ignore[method-assign]
    torch.cuda.empty_cache = lambda: None
    sys.argv = [script, *argv]
    runpy.run_path(script, run_name="__main__")


async def load(
    url: str,
    clients: int,
    per_request: int,
    requests_each: int,
    queries: list[str],
    server_pid: int | None = None,
    client: str = "raw",
) -> dict:
    """Closed-loop clients; every request's latency; queries/s over the whole run.

    ``client="raw"`` (default): one :class:`~_raw_http.RawHttpConnection` per client, about
    0.1 ms of CPU per request; ``"httpx"``: one shared ``httpx.AsyncClient``, 0.9-1.7 ms, which
    on this machine's 2 cores is taken from the server under test. A request counts as an
    error unless it is a 200 with one result list per query; a failed connection counts its
    request as an error and is opened again.

    Also the CPU each side spent: the server process's (user + system, from ``server_pid``)
    per query, and this process's (the clients') per request, so the report can tell a
    server that is out of CPU from one that leaves the CPU idle between batches."""
    import psutil

    server = psutil.Process(server_pid) if server_pid else None
    lat: list[float] = []
    errors = 0

    def body(c: int, r: int) -> dict:
        start = (c * requests_each + r) * per_request
        qs = [queries[(start + j) % len(queries)] for j in range(per_request)]
        return {"queries": qs, "topk": 3, "return_scores": True}  # as Search-R1's client sends

    def check(status: int, answer: object) -> None:
        nonlocal errors
        ok = status == 200 and isinstance(answer, dict) and len(answer.get("result", ())) == per_request
        errors += not ok

    async def one_raw_client(c: int) -> None:
        nonlocal errors
        conn: RawHttpConnection | None = None
        # a failed request (or connect) counts as an error, and the connection is opened again
        for r in range(requests_each):
            req = body(c, r)
            try:
                if conn is None:
                    conn = await RawHttpConnection(url).__aenter__()
                t0 = time.perf_counter()
                status, answer = await conn.post_json("/retrieve", req)
                lat.append((time.perf_counter() - t0) * 1000)
                check(status, answer)
            except (RawHttpError, OSError, asyncio.TimeoutError):
                errors += 1
                if conn is not None:
                    await conn.__aexit__(None, None, None)
                conn = None
        if conn is not None:
            await conn.__aexit__(None, None, None)

    async def run_clients() -> None:
        if client == "raw":
            await asyncio.gather(*(one_raw_client(c) for c in range(clients)))
            return
        limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
        async with httpx.AsyncClient(timeout=60, limits=limits) as shared:

            async def one_httpx_client(c: int) -> None:
                nonlocal errors
                for r in range(requests_each):
                    req = body(c, r)
                    t0 = time.perf_counter()
                    try:
                        resp = await shared.post(url + "/retrieve", json=req)
                    except httpx.HTTPError:
                        errors += 1
                        continue
                    lat.append((time.perf_counter() - t0) * 1000)
                    check(resp.status_code, resp.json() if resp.status_code == 200 else None)

            await asyncio.gather(*(one_httpx_client(c) for c in range(clients)))

    s0 = sum(server.cpu_times()[:2]) if server else 0.0
    c0 = time.process_time()
    t0 = time.perf_counter()
    await run_clients()
    wall = time.perf_counter() - t0
    client_cpu = time.process_time() - c0
    server_cpu = sum(server.cpu_times()[:2]) - s0 if server else float("nan")
    n = clients * requests_each
    return {
        "requests_per_s": n / wall,
        "queries_per_s": n * per_request / wall,
        "p50_ms": percentile(lat, 0.5),
        "p95_ms": percentile(lat, 0.95),
        "errors": errors,
        "server_cpu_ms_per_query": server_cpu * 1000 / (n * per_request),
        "client_cpu_ms_per_request": client_cpu * 1000 / n,
    }


ENCODERS = ("store", "store, 2 threads x 1", "sentence-transformers")  # bare encoder kinds


def encoder_name(kind: str, backend: str) -> str:
    return {
        "store": f"store encoder ({backend})",
        "store, 2 threads x 1": f"store encoder ({backend}), {POOL[0]} threads x {POOL[1]}",
        "sentence-transformers": "sentence-transformers encode",
    }[kind]


def make_encoder(kind: str, home: Path, backend: str) -> Callable[[list[str]], object]:
    """One bare encoder: the store's as the default server runs it (one encoder thread, torch's
    team), the store's as ``--encoder-workers 2 --encoder-threads 1`` runs it (a batch split
    over both threads, ``Embedder._split``),
    or plain sentence-transformers ``encode``."""
    from parallelsearch.stores.encoding.embedder import DEFAULT_MODEL, Embedder, resolve_model_path

    if kind == "sentence-transformers":
        from sentence_transformers import SentenceTransformer

        plain = SentenceTransformer(resolve_model_path(DEFAULT_MODEL), device="cpu")
        return lambda qs: plain.encode(
            qs, normalize_embeddings=True, convert_to_numpy=True, show_progress_bar=False
        )
    workers, threads = POOL if kind == "store, 2 threads x 1" else (1, None)
    embedder = Embedder(
        DEFAULT_MODEL, backend=backend, cache_dir=home / "a" / "models", workers=workers, threads=threads
    )
    return embedder.encode_queries


def bare_encoder_child(kind: str, home: Path, backend: str) -> None:
    """Child process: one bare encoder's rows, as JSON on stdout.

    Each encoder runs alone in a fresh process: two OpenMP teams in one process (torch on the
    main thread and on an encoder thread) slow each other down for the rest of the process,
    ~7.5 -> ~10 ms for a batch-1 query here (likely libgomp's throttled spinning once it
    manages more threads than there are cores). A server has one team, so its reference must
    too."""
    print(json.dumps(bare_encoder_rows(make_encoder(kind, home, backend), hotpot_questions())))


def bare_encoder_rows(fn: Callable[[list[str]], object], queries: list[str]) -> dict:
    """queries/s, median ms per call and CPU per query of one encoder at each batch size."""
    out: dict = {}
    for b in BATCHES:
        fn(queries[:b])  # warm-up
        times = []
        n_calls = max(3, 48 // b)
        c0 = time.process_time()
        for i in range(n_calls):
            chunk = [queries[(i * b + j) % len(queries)] for j in range(b)]
            t0 = time.perf_counter()
            fn(chunk)
            times.append(time.perf_counter() - t0)
        cpu = time.process_time() - c0
        med = statistics.median(times)
        out[b] = {"ms": med * 1000, "queries_per_s": b / med, "cpu_ms_per_query": cpu * 1000 / (n_calls * b)}
    return out


def bare_encoders_in_children(home: Path, backend: str) -> dict:
    """Every bare encoder's rows, each measured in its own child process (one after another)."""
    out = {}
    for kind in ENCODERS:
        cmd = [sys.executable, str(Path(__file__).resolve()), "--bare-encoder", kind, "--reuse", str(home)]
        cmd += ["--backend", backend]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
        if done.returncode != 0:
            raise RuntimeError(f"bare encoder {kind!r} failed: {done.stderr[-2000:]}")
        rows = json.loads(done.stdout.strip().splitlines()[-1])
        out[encoder_name(kind, backend)] = {int(b): r for b, r in rows.items()}
    return out


def engine_of(backend: str | None) -> str:
    """The engine a server told ``backend`` runs here (``auto``/None: the servers' own rule,
    no device named: ONNX on CPU, torch where torch sees CUDA)."""
    from parallelsearch.stores.encoding.backend import choose_backend

    return choose_backend(backend or "auto")


def median_rows(samples: list[dict]) -> dict:
    """Each figure's median over the rounds (a round without samples, None, is left out)."""
    medians = {k: [s[k] for s in samples if s[k] is not None] for k in samples[0]}
    return {k: statistics.median(xs) if xs else None for k, xs in medians.items()}


def main(argv: list[str] | None = None) -> dict:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--official-on-cpu"]:  # the child of OfficialServer: the script's own arguments follow
        run_official_on_cpu(argv[1], argv[2:])
        return {}
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument(
        "--backend",
        choices=("auto", "torch", "onnx", "onnx-int8"),
        help="encoder backend of the servers (default: auto, the project's default engine)",
    )
    ap.add_argument("--official", type=Path, help="a ParallelSearch/Search-R1 checkout (optional column)")
    ap.add_argument("--reuse", type=Path, help="the folder a previous run printed (skips indexing)")
    ap.add_argument(
        "--client",
        choices=("raw", "httpx"),
        default="raw",
        help="load generator: a lean raw HTTP/1.1 client (default) or httpx.AsyncClient (1-2 ms CPU/request more)",
    )
    ap.add_argument("--no-encoder-server", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--bare-encoder", choices=ENCODERS, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.bare_encoder:
        bare_encoder_child(args.bare_encoder, args.reuse, engine_of(args.backend))
        return {}
    if args.no_encoder_server:
        serve_no_encoder(args.no_encoder_server)
        return {}
    if not HOTPOT.is_file():
        sys.exit(f"benchmark data {HOTPOT} is missing")

    from parallelsearch.stores import ChromaStore
    from parallelsearch.stores.encoding.embedder import DEFAULT_MODEL, Embedder, resolve_model_path

    queries = hotpot_questions()
    backend = engine_of(args.backend)  # the engine the default servers run (auto: ONNX on CPU)
    served = args.backend or "auto"  # what the servers are told
    if args.reuse:
        home = args.reuse
    else:
        home = Path(tempfile.mkdtemp(prefix="retrieve-server-"))
        print(f"indexing {HOTPOT.name} into {home} ...")
        build_store(home / "a", "onnx-int8" if backend == "onnx-int8" else "onnx")
    for copy in ("b", "c", "d"):  # an embedded store is one process's: one copy each
        if not (home / copy).exists():
            shutil.copytree(home / "a", home / copy)
    ours = Embedder(DEFAULT_MODEL, backend=backend, cache_dir=home / "a" / "models", workers=1)
    timing_store = ChromaStore("hotpot500", path=home / "d" / "chroma", embedder=ours, create=False)
    encoders = [encoder_name(kind, backend) for kind in ENCODERS]
    other, other_flags = OTHER_ARRANGEMENT["torch" if backend == "torch" else "onnx"]
    servers = {
        "batched": Server(home / "a", ["--max-batch", "64"], served),
        "unbatched": Server(home / "b", ["--max-batch", "0"], served),
        other: Server(home / "c", ["--max-batch", "64", *other_flags], served),
    }
    servers[NO_ENCODER] = NoEncoderServer()
    if args.official:
        servers["official"] = OfficialServer(args.official, home / "d", resolve_model_path(DEFAULT_MODEL))
    samples: dict[str, dict[str, list[dict]]] = {v: {k: [] for k in LOADS} for v in servers}
    enc_samples: list[dict] = []
    chroma_samples: list[dict] = []
    with contextlib.ExitStack() as running:
        for srv in servers.values():
            if srv is not servers.get("official"):
                running.enter_context(srv)
        for srv in servers.values():
            if srv is not servers.get("official"):
                asyncio.run(load(srv.url, 4, 1, 8, queries, client=args.client))  # warm-up
        agreement = None
        if "official" in servers:
            with servers["official"] as official:
                agreement = top_k_agreement(servers["batched"].url, official.url, queries[:100])
            print(f"top-3 ids, ours (HNSW) vs official (FAISS flat), same embeddings: {agreement:.3f} agree")
        for _ in tqdm(range(args.rounds), desc="rounds"):
            enc_samples.append(bare_encoders_in_children(home, backend))
            chroma_samples.append(chroma_query_ms(timing_store, queries))
            for name, srv in servers.items():
                if name == "official":
                    srv.start()
                try:
                    for lname, (c, per, each) in LOADS.items():
                        samples[name][lname].append(
                            asyncio.run(load(srv.url, c, per, each, queries, srv.proc.pid, args.client))
                        )
                finally:
                    if name == "official":
                        srv.stop()
    enc = {name: {b: median_rows([s[name][b] for s in enc_samples]) for b in BATCHES} for name in encoders}
    rows = {v: {lname: median_rows(s) for lname, s in per.items()} for v, per in samples.items()}
    chroma = {b: statistics.median(c[b] for c in chroma_samples) for b in chroma_samples[0]}
    data = report(args, enc, rows, encoders, chroma)
    if agreement is not None:
        data["official_top3_agreement"] = round(agreement, 4)
        write("retrieve_server" + (f"_{args.backend}" if args.backend else ""), data)
    return data


def floor_report(
    enc: dict, rows: dict, encoders: list[str], chroma: dict, best_of: dict, overall: str, cores: int
) -> dict:
    """The best any server could do on this machine, from costs measured in this run.

    1 client: the encoder's batch-1 call, the store's batch-1 Chroma query and the HTTP round
    trip of the no-encoder server are each paid once per request, one after the other.
    Throughput: the cores, divided by what every query costs at the least: the best bare
    encoder's CPU per query, the no-encoder server's CPU per query, a batch-8 Chroma query's
    share, and the clients' own CPU (they run on the same cores here)."""
    store_enc = next(iter(encoders))
    http = rows[NO_ENCODER]
    batch1 = enc[store_enc][1]["ms"]
    one_client = batch1 + chroma[1] + http["1c_1q"]["p50_ms"]
    best = enc[overall][best_of[overall]]
    out = {"1c_p50_floor_ms": one_client, "1c_p50_floor_over_batch1": one_client / batch1}
    print(
        f"1-client floor: batch-1 encode {batch1:.1f} + Chroma query {chroma[1]:.2f} + HTTP round trip "
        f"{http['1c_1q']['p50_ms']:.2f} ms (no-encoder server) = {one_client:.1f} ms = "
        f"{one_client / batch1:.2f}x the batch-1 call (goal <= 1.15)"
    )
    for ln in ("8c_1q", "32c_1q"):
        client = rows["batched"][ln]["client_cpu_ms_per_request"]
        per_query = best["cpu_ms_per_query"] + http[ln]["server_cpu_ms_per_query"] + chroma[8] / 8 + client
        ceiling = 1000 * cores / per_query
        out[f"{ln}_floor_queries_per_s"] = ceiling
        out[f"{ln}_floor_over_best"] = ceiling / best["queries_per_s"]
        little = (
            f"; mean latency at 8 clients >= {8000 / ceiling:.0f} ms (Little's law)" if ln == "8c_1q" else ""
        )
        print(
            f"throughput floor at {ln}: {cores} cores / ({best['cpu_ms_per_query']:.2f} encoder + "
            f"{http[ln]['server_cpu_ms_per_query']:.2f} HTTP + {chroma[8] / 8:.2f} Chroma + {client:.2f} "
            f"clients ms CPU per query) = {ceiling:.0f} queries/s = {ceiling / best['queries_per_s']:.2f}x "
            f"the best bare encoder ({overall}){little}"
        )
    out.update(eight_client_floor(enc, rows, chroma, best, overall, cores))
    return out


def eight_client_floor(enc: dict, rows: dict, chroma: dict, best: dict, overall: str, cores: int) -> dict:
    """The 8-client floor once batch size is counted: 8 closed-loop clients have 8 queries in
    flight, so the encoder never sees the batch its best throughput needs while kept busy.

    * One batch at a time (all 8 together, split over the encoder threads): the encoder idles
      while the batch's Chroma query and HTTP answers run, so a cycle is at least the bare
      batch-8 call + the batch-8 Chroma query + the no-encoder server's 8-client p50.
    * Two or more batches at once (the encoder kept busy): each batch is at most 4, so the
      encoder does at most its bare batch-4 queries/s (wall clock: the bare rows measure how
      well its threads scale together, which CPU time alone does not), and the Chroma query's,
      the HTTP path's and the clients' CPU per query take the same cores on top.

    The floor is the better of the two, for the bare encoder with the best throughput."""
    http = rows[NO_ENCODER]["8c_1q"]
    client = rows["batched"]["8c_1q"]["client_cpu_ms_per_request"]
    e8, e4 = enc[overall][8], enc[overall][4]
    one_batch = 8000 / (e8["ms"] + chroma[8] + http["p50_ms"])
    other_cpu = chroma[4] / 4 + http["server_cpu_ms_per_query"] + client
    pipelined = 1000 / (1000 / e4["queries_per_s"] + other_cpu / cores)
    floor = max(one_batch, pipelined)
    print(
        f"8-client floor with batch size counted ({overall}): one batch of 8 at a time 8 / "
        f"({e8['ms']:.1f} encode + {chroma[8]:.2f} Chroma + {http['p50_ms']:.2f} HTTP ms) = {one_batch:.0f} q/s; "
        f"batches of 4 kept in flight: bare batch 4 {e4['queries_per_s']:.0f} q/s plus {other_cpu:.2f} ms CPU "
        f"per query over {cores} cores = {pipelined:.0f} q/s; floor {floor:.0f} q/s = "
        f"{floor / best['queries_per_s']:.2f}x the best bare encoder (goal >= 0.8)"
    )
    return {
        "8c_one_batch_floor_queries_per_s": one_batch,
        "8c_pipelined_floor_queries_per_s": pipelined,
        "8c_batch_floor_over_best": floor / best["queries_per_s"],
    }


def report(args, enc: dict, rows: dict, encoders: list[str], chroma: dict) -> dict:
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
                f"p50 {fmt(r['p50_ms'], '6.1f')} ms, p95 {fmt(r['p95_ms'], '6.1f')} ms, errors {r['errors']:.0f}; CPU "
                f"server {r['server_cpu_ms_per_query']:.1f} ms/query, clients {r['client_cpu_ms_per_request']:.1f} ms/request"
            )
    # goals: each batching server against every bare encoder, and against the best of them all
    cores = os.cpu_count() or 1
    best_of = {name: max(enc[name], key=lambda bb: enc[name][bb]["queries_per_s"]) for name in encoders}
    overall = max(encoders, key=lambda n: enc[n][best_of[n]]["queries_per_s"])
    goals: dict = {}
    for v in (x for x in rows if x.startswith("batched")):
        b = rows[v]
        ceilings = {
            ln: 1000 * cores / (b[ln]["server_cpu_ms_per_query"] + b[ln]["client_cpu_ms_per_request"])
            for ln in ("8c_1q", "32c_1q")
        }
        for ln, ceiling in ceilings.items():
            print(
                f"{v}: CPU ceiling at {ln}: {cores} cores / ({b[ln]['server_cpu_ms_per_query']:.1f} server + "
                f"{b[ln]['client_cpu_ms_per_request']:.1f} client ms CPU per query) = {ceiling:.0f} queries/s; "
                f"measured {b[ln]['queries_per_s']:.0f} = {b[ln]['queries_per_s'] / ceiling:.2f} of it "
                "(the rest: CPU idle between batches)"
            )
        for name in encoders:
            e = enc[name][best_of[name]]
            best = e["queries_per_s"]
            g = {
                "best_batched_queries_per_s": best,
                "best_batch": best_of[name],
                "best_cpu_ms_per_query": e["cpu_ms_per_query"],
                "8c_over_best": b["8c_1q"]["queries_per_s"] / best,
                "32c_over_best": b["32c_1q"]["queries_per_s"] / best,
                "cpu_ceiling_8c_over_best": ceilings["8c_1q"] / best,
                "cpu_ceiling_32c_over_best": ceilings["32c_1q"] / best,
                "unbatched_8c_over_best": rows["unbatched"]["8c_1q"]["queries_per_s"] / best,
                "unbatched_32c_over_best": rows["unbatched"]["32c_1q"]["queries_per_s"] / best,
                "1c_p50_over_batch1": b["1c_1q"]["p50_ms"] / enc[name][1]["ms"],
                "p95_8c_ms": b["8c_1q"]["p95_ms"],
            }
            goals.setdefault(v, {})[name] = g
            print(
                f"{v} against bare {name}{' (the best bare encoder)' if name == overall else ''}: 8 clients "
                f"{g['8c_over_best']:.2f}x, 32 clients {g['32c_over_best']:.2f}x of its best {best:.0f} q/s "
                f"at batch {best_of[name]} (goal >= 0.8; CPU ceiling {g['cpu_ceiling_8c_over_best']:.2f}x / "
                f"{g['cpu_ceiling_32c_over_best']:.2f}x; unbatched {g['unbatched_8c_over_best']:.2f}x / "
                f"{g['unbatched_32c_over_best']:.2f}x); 1-client p50 {g['1c_p50_over_batch1']:.2f}x its "
                "batch-1 call (goal <= 1.15)"
            )
        print(f"{v}: p95 at 8 clients {b['8c_1q']['p95_ms']:.1f} ms (goal <= 50)")
    floors = floor_report(enc, rows, encoders, chroma, best_of, overall, cores)
    b = rows["batched"]
    for v in rows:
        if v != "batched" and v != NO_ENCODER:
            print(
                f"batched / {v}: "
                + ", ".join(
                    f"{ln} {b[ln]['queries_per_s'] / rows[v][ln]['queries_per_s']:.2f}x" for ln in LOADS
                )
            )
    data = {
        "rounds": args.rounds,
        "backend": args.backend or "auto",
        "engine": engine_of(args.backend),
        "client": args.client,
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
        "best_bare_encoder": overall,
        "chroma_query_ms": {str(k): round(x, 2) for k, x in chroma.items()},
        "floors": {k: round(x, 3) for k, x in floors.items()},
        "cores": cores,
        "goals": {
            v: {n: {k: round(x, 3) for k, x in g.items()} for n, g in per.items()} for v, per in goals.items()
        },
    }
    suffix = f"_{args.backend}" if args.backend else ""
    write(f"retrieve_server{suffix}", data)
    best = enc[overall][best_of[overall]]["queries_per_s"]
    plot_bars(
        ROOT / "docs" / "img" / f"retrieve_server{suffix}.png",
        f"/retrieve queries/s by load (bare encoder best {best:.0f} q/s: {overall})",
        {ln: {v: rows[v][ln]["queries_per_s"] for v in rows if v != NO_ENCODER} for ln in LOADS},
        "queries/s",
        hline=(0.8 * best, "0.8x bare encoder best (goal at 8/32 clients)"),
    )
    return data


if __name__ == "__main__":
    main()
