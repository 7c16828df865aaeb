"""``/retrieve`` server under concurrent load: cross-request batching against one search per
request, against the bare encoder on the same queries, and (``--official PATH``) against the
official ParallelSearch/Search-R1 retrieval server (:mod:`_official`).

Real ``serve-retriever`` processes over the 500 HotpotQA dev questions' paragraphs, closed-loop
clients, every variant interleaved round by round; each bare encoder is timed in its own child
process (a server has one OpenMP team, so its reference must too), and :mod:`_floors` turns the
measured costs into the best any server could do here. Variants, figures and goals:
docs/performance.md, "The ``/retrieve`` server under concurrent load".
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
from _common import HOTPOT, ROOT, fmt, latency, parser, plain_encoder, plot_bars, require, rounded, write
from _floors import NO_ENCODER, floor_report
from _official import OfficialServer, top_k_agreement
from _raw_http import RawHttpConnection, RawHttpError
from _server import CLI, ServerProcess, cli_env, cli_server
from tqdm import tqdm

from parallelsearch.stores.http.loopback import free_port

LOADS = {  # name: (clients, queries per request, requests per client)
    "1c_1q": (1, 1, 120),
    "1c_4q": (1, 4, 60),
    "8c_1q": (8, 1, 40),
    "32c_1q": (32, 1, 16),
}
BATCHES = (1, 2, 4, 8, 32, 64)
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
    cmd = [*CLI, "index", str(HOTPOT), "--store", "hotpot500", "--encoder-backend", backend]
    subprocess.run(cmd, check=True, env=cli_env(home), cwd=home, timeout=1800)
    return home


def server(home: Path, extra: list[str], backend: str) -> ServerProcess:
    """One ``serve-retriever`` process on 127.0.0.1 over the store under ``home``."""
    args = ("serve-retriever", "--store", "hotpot500", *extra, "--encoder-backend", backend)
    return cli_server(*args, env=cli_env(home), start_timeout_s=300)


def baseline_overlay(src: Path, dest: Path) -> Path:
    """An import root under which ``parallelsearch`` is the checkout ``src`` (its folders mapped as
    pyproject.toml maps them), for a server of the code before a change: put it first on
    ``PYTHONPATH`` and run the child outside this checkout."""
    pkg = dest / "parallelsearch"
    if not pkg.exists():
        shutil.copytree(src / "parallelsearch", pkg)
        for folder in ("agents", "graphs", "rl", "stores"):
            (pkg / folder).symlink_to((src / folder).resolve())
    return dest


def baseline_server(home: Path, extra: list[str], backend: str, overlay: Path) -> ServerProcess:
    """:func:`server` running the code of :func:`baseline_overlay` (cwd: ``home``, outside this checkout)."""
    args = ("serve-retriever", "--store", "hotpot500", *extra, "--encoder-backend", backend)
    env = cli_env(home, PYTHONPATH=str(overlay))
    return cli_server(*args, env=env, start_timeout_s=300)


def compare_with_baseline(args: argparse.Namespace, home: Path, served: str, queries: list[str]) -> dict:
    """``--baseline SRC``: the batched server of this checkout and of ``SRC`` (the code before),
    over copies of one store, loads interleaved round by round; queries/s at each load and ratios."""
    overlay = baseline_overlay(args.baseline, home / "baseline-src")
    for copy in ("e",):
        if not (home / copy).exists():
            shutil.copytree(home / "a", home / copy)
    servers = {
        "batched (this checkout)": server(home / "a", ["--max-batch", "64"], served),
        "batched (baseline)": baseline_server(home / "e", ["--max-batch", "64"], served, overlay),
    }
    loads = {k: LOADS[k] for k in args.loads}
    samples: dict[str, dict[str, list[dict]]] = {v: {k: [] for k in loads} for v in servers}
    with contextlib.ExitStack() as running:
        for srv in servers.values():
            running.enter_context(srv)
            asyncio.run(load(srv.url, 4, 1, 8, queries, client=args.client))  # warm-up
        for i in tqdm(range(args.rounds), desc="rounds"):
            for lname, (c, per, each) in loads.items():
                # alternate within a load, and which goes first from round to round: drift and
                # the order hit both alike
                for name, srv in list(servers.items())[:: 1 if i % 2 == 0 else -1]:
                    samples[name][lname].append(
                        asyncio.run(load(srv.url, c, per, each, queries, srv.proc.pid, args.client))
                    )
    rows = {v: {lname: median_rows(s) for lname, s in per.items()} for v, per in samples.items()}
    new, old = rows["batched (this checkout)"], rows["batched (baseline)"]
    for lname in loads:
        for v in rows:
            r = rows[v][lname]
            print(
                f"{v:24s} {lname:6s}: {r['queries_per_s']:6.1f} queries/s, p50 {fmt(r['p50_ms'], '6.1f')} ms, "
                f"p95 {fmt(r['p95_ms'], '6.1f')} ms, errors {r['errors']:.0f}"
            )
    paired = {  # each round's two runs back to back: their ratio is less exposed to the machine's drift
        k: [
            a["queries_per_s"] / b["queries_per_s"]
            for a, b in zip(
                samples["batched (this checkout)"][k], samples["batched (baseline)"][k], strict=True
            )
        ]
        for k in loads
    }
    for lname, ratios in paired.items():
        print(
            f"this checkout / baseline at {lname}: {new[lname]['queries_per_s'] / old[lname]['queries_per_s']:.3f}x "
            f"of the medians; round by round {statistics.median(ratios):.3f}x median "
            f"({min(ratios):.3f}..{max(ratios):.3f})"
        )
    data = {
        "rounds": args.rounds,
        "baseline": str(args.baseline),
        "client": args.client,
        "servers": rounded(rows, 2),
        "ratio": {k: round(new[k]["queries_per_s"] / old[k]["queries_per_s"], 4) for k in loads},
        "round_ratios": rounded(paired, 4),
    }
    write("retrieve_server_baseline", data)
    return data


def no_encoder_server() -> ServerProcess:
    """The same ``/retrieve`` app (batching, body guard, JSON) over a stand-in searcher that
    returns three fixed passages at once: what the HTTP path costs with no encoder and no
    Chroma, i.e. the part of every request that batching cannot share."""
    port = free_port()
    cmd = [sys.executable, str(Path(__file__).resolve()), "--no-encoder-server", str(port)]
    return ServerProcess(cmd, env=dict(os.environ), port=port, start_timeout_s=300)


def serve_no_encoder(port: int) -> None:
    """Child process of :func:`no_encoder_server` (a benchmark stand-in, never a product path)."""
    import uvicorn

    from parallelsearch.stores import create_retrieval_app
    from parallelsearch.stores.http.read_limits import ReadLimits
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
    # the served uvicorn options (read deadlines, head limit, no trusted proxy), as serve-retriever's
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", **ReadLimits().uvicorn_options())


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


class HttpxConnection:
    """:class:`RawHttpConnection`'s shape over one shared ``httpx.AsyncClient`` (``--client httpx``)."""

    def __init__(self, client: httpx.AsyncClient, url: str) -> None:
        self.client, self.url = client, url

    async def __aenter__(self) -> HttpxConnection:
        return self

    async def __aexit__(self, *exc: object) -> None:
        pass

    async def post_json(self, path: str, body: object) -> tuple[int, object]:
        """(status, the response): read it after the clock stops, as the old httpx loop did."""
        r = await self.client.post(self.url + path, json=body)
        return r.status_code, r


async def closed_loop_client(
    url: str,
    client: str,
    shared: httpx.AsyncClient,
    c: int,
    per_request: int,
    requests_each: int,
    queries: list[str],
    lat: list[float],
) -> int:
    """Client ``c``'s requests, each sent when the last is answered, its latencies appended to
    ``lat``; its errors, counted as :func:`load` says, so one bad answer does not end the run."""
    errors = 0
    conn: RawHttpConnection | HttpxConnection | None = None
    for r in range(requests_each):
        start = (c * requests_each + r) * per_request
        qs = [queries[(start + j) % len(queries)] for j in range(per_request)]
        body = {"queries": qs, "topk": 3, "return_scores": True}  # as Search-R1's client sends
        try:
            if conn is None:
                conn = HttpxConnection(shared, url) if client == "httpx" else RawHttpConnection(url)
                await conn.__aenter__()
            t0 = time.perf_counter()
            status, answer = await conn.post_json("/retrieve", body)
            lat.append((time.perf_counter() - t0) * 1000)
            if isinstance(answer, httpx.Response):
                answer = answer.json() if status == 200 else None
            result = answer.get("result", ()) if isinstance(answer, dict) else ()
            errors += status != 200 or len(result) != per_request
        except (RawHttpError, httpx.HTTPError, OSError, asyncio.TimeoutError, ValueError):
            errors += 1
            if conn is not None:
                await conn.__aexit__()
            conn = None
    if conn is not None:
        await conn.__aexit__()
    return errors


async def load(
    url: str,
    clients: int,
    per_request: int,
    requests_each: int,
    queries: list[str],
    server_pid: int | None = None,
    client: str = "raw",
) -> dict:
    """Closed-loop clients (``client``: :mod:`_raw_http`, or one shared ``httpx.AsyncClient``);
    every request's latency, queries/s over the run, and the CPU the server process
    (``server_pid``) spent per query and the clients per request, so the report can tell a server
    out of CPU from one idle between batches. A request is an error unless it is a 200 with one
    result list per query; a failed connection is opened again."""
    import psutil

    server = psutil.Process(server_pid) if server_pid else None
    lat: list[float] = []
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(timeout=60, limits=limits) as shared:
        s0 = sum(server.cpu_times()[:2]) if server else 0.0
        c0 = time.process_time()
        t0 = time.perf_counter()
        errors = sum(
            await asyncio.gather(
                *(
                    closed_loop_client(url, client, shared, c, per_request, requests_each, queries, lat)
                    for c in range(clients)
                )
            )
        )
        wall = time.perf_counter() - t0
        client_cpu = time.process_time() - c0
        server_cpu = sum(server.cpu_times()[:2]) - s0 if server else float("nan")
    n = clients * requests_each
    return {
        "requests_per_s": n / wall,
        "queries_per_s": n * per_request / wall,
        **latency(lat),
        "errors": errors,
        "server_cpu_ms_per_query": server_cpu * 1000 / (n * per_request),
        "client_cpu_ms_per_request": client_cpu * 1000 / n,
    }


#: bare encoder kind -> its name in the figures (``{backend}`` filled in)
ENCODERS = {
    "store": "store encoder ({backend})",
    "store, 2 threads x 1": f"store encoder ({{backend}}), {POOL[0]} threads x {POOL[1]}",
    "sentence-transformers": "sentence-transformers encode",
}


def make_encoder(kind: str, home: Path, backend: str) -> Callable[[list[str]], object]:
    """One bare encoder: the store's as the default server runs it (one encoder thread), the
    store's as ``--encoder-workers 2 --encoder-threads 1`` runs it, or plain sentence-transformers."""
    from parallelsearch.stores.encoding.embedder import DEFAULT_MODEL, Embedder

    if kind == "sentence-transformers":
        return plain_encoder()
    workers, threads = POOL if kind == "store, 2 threads x 1" else (1, None)
    embedder = Embedder(
        DEFAULT_MODEL, backend=backend, cache_dir=home / "a" / "models", workers=workers, threads=threads
    )
    return embedder.encode_queries


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
    """Every bare encoder's rows, each measured alone in its own child process: two OpenMP teams
    in one process slow each other for the rest of the process, and a server has one team."""
    out = {}
    for kind in ENCODERS:
        cmd = [sys.executable, str(Path(__file__).resolve()), "--bare-encoder", kind, "--reuse", str(home)]
        cmd += ["--backend", backend]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
        if done.returncode != 0:
            raise RuntimeError(f"bare encoder {kind!r} failed: {done.stderr[-2000:]}")
        rows = json.loads(done.stdout.strip().splitlines()[-1])
        out[ENCODERS[kind].format(backend=backend)] = {int(b): r for b, r in rows.items()}
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


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The script's options, and the hidden ones its child processes are started with."""
    ap = parser(__doc__)
    ap.add_argument("--rounds", type=int, default=3)
    backends = ("auto", "torch", "onnx", "onnx-int8")
    ap.add_argument("--backend", choices=backends, help="encoder backend of the servers (none: auto)")
    ap.add_argument("--official", type=Path, help="a ParallelSearch/Search-R1 checkout (optional column)")
    ap.add_argument("--reuse", type=Path, help="the folder a previous run printed (skips indexing)")
    clients = ("raw", "httpx")  # a lean raw HTTP/1.1 client, or httpx.AsyncClient (1-2 ms CPU/request more)
    ap.add_argument("--client", choices=clients, default="raw", help="load generator")
    ap.add_argument(
        "--baseline",
        type=Path,
        help="a checkout of the code before a change (git archive COMMIT | tar -x -C DIR): compare its "
        "batched server with this one's, nothing else",
    )
    ap.add_argument(
        "--loads",
        type=lambda s: s.split(","),
        default=list(LOADS),
        help=f"with --baseline: of {', '.join(LOADS)}",
    )
    ap.add_argument("--no-encoder-server", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--bare-encoder", choices=ENCODERS, help=argparse.SUPPRESS)
    return ap.parse_args(argv)


def copy_stores(home: Path) -> None:
    """The store copied for the unbatched and other servers and the timing store."""
    for copy in ("b", "c", "d"):  # an embedded store is one process's: one copy each
        if not (home / copy).exists():
            shutil.copytree(home / "a", home / copy)


def variant_servers(args: argparse.Namespace, home: Path, served: str, backend: str) -> dict:
    """Every server variant, each over its own copy of the store: batched, unbatched, the engine's
    other arrangement, the no-encoder stand-in and, with ``--official``, the official one."""
    from parallelsearch.stores.encoding.embedder import DEFAULT_MODEL, resolve_model_path

    other, other_flags = OTHER_ARRANGEMENT["torch" if backend == "torch" else "onnx"]
    servers = {
        "batched": server(home / "a", ["--max-batch", "64"], served),
        "unbatched": server(home / "b", ["--max-batch", "0"], served),
        other: server(home / "c", ["--max-batch", "64", *other_flags], served),
        NO_ENCODER: no_encoder_server(),
    }
    if args.official:
        servers["official"] = OfficialServer(args.official, home / "d", resolve_model_path(DEFAULT_MODEL))
    return servers


def open_timing_store(home: Path, backend: str):
    """A copy of the store opened in this process, to time Chroma's own query without a server."""
    from parallelsearch.stores import ChromaStore
    from parallelsearch.stores.encoding.embedder import DEFAULT_MODEL, Embedder

    ours = Embedder(DEFAULT_MODEL, backend=backend, cache_dir=home / "a" / "models", workers=1)
    return ChromaStore("hotpot500", path=home / "d" / "chroma", embedder=ours, create=False)


def measure_rounds(
    args: argparse.Namespace, servers: dict, timing_store, home: Path, backend: str, queries: list[str]
) -> tuple:
    """Every round: the bare encoders, Chroma's own query, then every server at every load, so
    drift over the run hits all alike; (server samples, encoder samples, Chroma samples, agreement)."""
    samples: dict[str, dict[str, list[dict]]] = {v: {k: [] for k in LOADS} for v in servers}
    enc_samples: list[dict] = []
    chroma_samples: list[dict] = []
    with contextlib.ExitStack() as running:
        for name, srv in servers.items():
            if name != "official":  # the official server starts and stops each round
                running.enter_context(srv)
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
                with srv if name == "official" else contextlib.nullcontext():
                    for lname, (c, per, each) in LOADS.items():
                        r = asyncio.run(load(srv.url, c, per, each, queries, srv.proc.pid, args.client))
                        samples[name][lname].append(r)
    return samples, enc_samples, chroma_samples, agreement


def main(argv: list[str] | None = None) -> dict:
    """The benchmark, or one of its child processes (a bare encoder, the no-encoder server)."""
    args = parse_args(argv)
    if args.bare_encoder:  # the child of bare_encoders_in_children: its rows as JSON on stdout
        encoder = make_encoder(args.bare_encoder, args.reuse, engine_of(args.backend))
        print(json.dumps(bare_encoder_rows(encoder, hotpot_questions())))
        return {}
    if args.no_encoder_server:
        serve_no_encoder(args.no_encoder_server)
        return {}
    require(HOTPOT)

    queries = hotpot_questions()
    backend = engine_of(args.backend)  # the engine the default servers run (auto: ONNX on CPU)
    served = args.backend or "auto"  # what the servers are told
    if args.reuse:
        home = args.reuse
    else:
        home = Path(tempfile.mkdtemp(prefix="retrieve-server-"))
        print(f"indexing {HOTPOT.name} into {home} ...")
        build_store(home / "a", "onnx-int8" if backend == "onnx-int8" else "onnx")
    if args.baseline:
        return compare_with_baseline(args, home, served, queries)
    copy_stores(home)
    timing_store = open_timing_store(home, backend)
    encoders = [name.format(backend=backend) for name in ENCODERS.values()]
    servers = variant_servers(args, home, served, backend)
    measured = measure_rounds(args, servers, timing_store, home, backend, queries)
    samples, enc_samples, chroma_samples, agreement = measured
    enc = {name: {b: median_rows([s[name][b] for s in enc_samples]) for b in BATCHES} for name in encoders}
    rows = {v: {lname: median_rows(s) for lname, s in per.items()} for v, per in samples.items()}
    chroma = {b: statistics.median(c[b] for c in chroma_samples) for b in chroma_samples[0]}
    return report(args, enc, rows, encoders, chroma, agreement)


def print_measurements(enc: dict, rows: dict) -> None:
    """Each bare encoder's rate per batch and each server's figures per load, as measured."""
    for name, per_b in enc.items():
        rates = ", ".join(
            f"batch {b} {r['queries_per_s']:.0f} q/s ({r['ms']:.1f} ms)" for b, r in per_b.items()
        )
        print(f"bare {name}: {rates}")
    for v, per in rows.items():
        for lname, r in per.items():
            print(
                f"{v:9s} {lname:6s}: {r['requests_per_s']:6.1f} req/s, {r['queries_per_s']:6.1f} queries/s, "
                f"p50 {fmt(r['p50_ms'], '6.1f')} ms, p95 {fmt(r['p95_ms'], '6.1f')} ms, errors {r['errors']:.0f}; CPU "
                f"server {r['server_cpu_ms_per_query']:.1f} ms/query, clients {r['client_cpu_ms_per_request']:.1f} ms/request"
            )


def goal_figures(enc: dict, rows: dict, encoders: list[str], best_of: dict, overall: str) -> dict:
    """Each batching server against every bare encoder's best batch, printed and returned: the
    goals are ratios to what the bare encoder does on its own."""
    goals: dict = {}
    for v in (x for x in rows if x.startswith("batched")):
        b = rows[v]
        for name in encoders:
            e = enc[name][best_of[name]]
            best = e["queries_per_s"]
            g = {
                "best_batched_queries_per_s": best,
                "best_batch": best_of[name],
                "best_cpu_ms_per_query": e["cpu_ms_per_query"],
                "8c_over_best": b["8c_1q"]["queries_per_s"] / best,
                "32c_over_best": b["32c_1q"]["queries_per_s"] / best,
                "unbatched_8c_over_best": rows["unbatched"]["8c_1q"]["queries_per_s"] / best,
                "unbatched_32c_over_best": rows["unbatched"]["32c_1q"]["queries_per_s"] / best,
                "1c_p50_over_batch1": b["1c_1q"]["p50_ms"] / enc[name][1]["ms"],
                "p95_8c_ms": b["8c_1q"]["p95_ms"],
            }
            goals.setdefault(v, {})[name] = g
            print(
                f"{v} against bare {name}{' (the best bare encoder)' if name == overall else ''}: 8 clients "
                f"{g['8c_over_best']:.2f}x, 32 clients {g['32c_over_best']:.2f}x of its best {best:.0f} q/s "
                f"at batch {best_of[name]} (goal >= 0.8; unbatched {g['unbatched_8c_over_best']:.2f}x / "
                f"{g['unbatched_32c_over_best']:.2f}x); 1-client p50 {g['1c_p50_over_batch1']:.2f}x its "
                "batch-1 call (goal <= 1.15)"
            )
        print(f"{v}: p95 at 8 clients {b['8c_1q']['p95_ms']:.1f} ms (goal <= 50)")
    return goals


def report(args, enc: dict, rows: dict, encoders: list[str], chroma: dict, agreement: float | None) -> dict:
    """The figures printed against the goals and the floors, written as JSON and plotted."""
    store_enc = next(iter(encoders))
    print_measurements(enc, rows)
    # goals: each batching server against every bare encoder, and against the best of them all
    cores = os.cpu_count() or 1
    best_of = {name: max(enc[name], key=lambda bb: enc[name][bb]["queries_per_s"]) for name in encoders}
    overall = max(encoders, key=lambda n: enc[n][best_of[n]]["queries_per_s"])
    goals = goal_figures(enc, rows, encoders, best_of, overall)
    floors = floor_report(enc, rows, encoders, chroma, best_of, overall, cores)
    b = rows["batched"]
    for v in [v for v in rows if v not in ("batched", NO_ENCODER)]:
        ratios = ", ".join(
            f"{ln} {b[ln]['queries_per_s'] / rows[v][ln]['queries_per_s']:.2f}x" for ln in LOADS
        )
        print(f"batched / {v}: {ratios}")
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
        "bare_encoder": rounded(enc, 2),
        "servers": rounded(rows, 2),
        "best_bare_encoder": overall,
        "chroma_query_ms": rounded(chroma, 2),
        "floors": rounded(floors, 3),
        "cores": cores,
        "official_top3_agreement": rounded(agreement, 4),
        "goals": rounded(goals, 3),
    }
    suffix = f"_{args.backend}" if args.backend else ""
    write(f"retrieve_server{suffix}", data)
    plot(rows, enc[overall][best_of[overall]]["queries_per_s"], overall, suffix)
    return data


def plot(rows: dict, best: float, overall: str, suffix: str) -> None:
    """Queries/s per load and server against 0.8x the best bare encoder, the goal line, for docs/."""
    plot_bars(
        ROOT / "docs" / "img" / f"retrieve_server{suffix}.png",
        f"/retrieve queries/s by load (bare encoder best {best:.0f} q/s: {overall})",
        {ln: {v: rows[v][ln]["queries_per_s"] for v in rows if v != NO_ENCODER} for ln in LOADS},
        "queries/s",
        hline=(0.8 * best, "0.8x bare encoder best (goal at 8/32 clients)"),
    )


if __name__ == "__main__":
    main()
