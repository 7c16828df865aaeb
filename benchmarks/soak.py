"""Soak: minutes of mixed load against both servers, as real processes on 127.0.0.1.

``parallelsearch serve-retriever`` over the shipped HotpotQA sample and ``parallelsearch serve``
(oracle policy, searching through it) get an interleaved random mix of good requests, bad inputs
and clients leaving mid-stream (:data:`MIX`); any answer a request may not get is an unexpected
error. Figures and goals: docs/performance.md, "Soak and the request guard".
"""

from __future__ import annotations

import asyncio
import json
import random
import shutil
import statistics
import sys
import tempfile
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from _common import OUT, fmt, graph_input, latency, parser, pyplot, records_store, save, write
from _server import ServerProcess, cli_env, cli_server
from tqdm import tqdm

from parallelsearch.demo_data import HOTPOTQA_SAMPLE

DEEP = b"[" * 50_000 + b"]" * 50_000
JSON = {"content-type": "application/json"}
# the app runs the oracle, which needs a question's gold answers: the repaired-surrogate questions carry them
SURROGATE_GOLD = {
    "golden_answers": ["Scott Derrickson"],
    "supporting_titles": ["Ed Wood", "Scott Derrickson"],
}
#: bad inputs with one fixed body: kind -> (server, path, body, the status it may get)
BAD = {  # a lone surrogate is repaired, then searched: 200
    "bad_retrieve_surrogate": ("retriever", "/retrieve", b'{"queries": ["Ed Wood \\ud800"]}', 200),
    "bad_retrieve_oversized": ("retriever", "/retrieve", b'{"queries": ["%s"]}' % (b"x" * 5_000_000), 413),
    "bad_retrieve_deep": ("retriever", "/retrieve", DEEP, 400),
    "bad_retrieve_json": ("retriever", "/retrieve", b'{"queries": [', 400),
    "bad_invoke_oversized": (
        "app",
        "/parallelsearch/invoke",
        b'{"input": {"question": "%s"}}' % (b"x" * 1_500_000),
        413,
    ),
    "bad_invoke_deep": ("app", "/rag/invoke", b'{"input": ' + DEEP + b"}", 400),
    "bad_invoke_json": ("app", "/parallelsearch/invoke", b"{not json", 400),
}
#: kind -> weight: how often each request kind is drawn
MIX = {
    "retrieve": 20,
    "invoke": 20,
    "invoke_config_hash": 5,
    "batch": 5,
    "stream": 15,
    "stream_disconnect": 5,
    "bad_retrieve_surrogate": 3,
    "bad_retrieve_oversized": 2,
    "bad_retrieve_deep": 2,
    "bad_retrieve_json": 2,
    "bad_invoke_surrogate": 3,
    "bad_invoke_oversized": 2,
    "bad_invoke_deep": 2,
    "bad_invoke_empty": 3,
    "bad_invoke_json": 2,
    "bad_stream_surrogate": 2,
}


@dataclass
class Tally:
    """What the workers saw: per kind, the count, the latencies of answered requests, the surprises."""

    requests: Counter = field(default_factory=Counter)
    expected_4xx: Counter = field(default_factory=Counter)
    unexpected: Counter = field(default_factory=Counter)
    latency_ms: dict = field(default_factory=lambda: defaultdict(list))
    per_second: Counter = field(default_factory=Counter)


def rss_mb(server: ServerProcess) -> float:
    import psutil

    return psutil.Process(server.proc.pid).memory_info().rss / 2**20


class Load:
    """The request kinds: each sends one request and says whether its answer was what it may be."""

    def __init__(self, retriever: str, app: str, questions: list[dict], rng: random.Random):
        self.retriever, self.app, self.questions, self.rng = retriever, app, questions, rng
        from langserve.lzstring import LZString

        self.hash = LZString.compressToEncodedURIComponent(json.dumps({"configurable": {"top_k": 2}}))

    def _input(self) -> dict:
        return graph_input(self.rng.choice(self.questions))

    def _titles(self) -> list[str]:
        q = self.rng.choice(self.questions)
        return q["metadata"].get("supporting_titles") or [q["question"]]

    async def send(self, client: httpx.AsyncClient, kind: str) -> tuple[int | str, set[int]]:
        """(the status or the outcome, the statuses this kind may get)."""
        if kind in BAD:
            server, path, body, status = BAD[kind]
            url = (self.retriever if server == "retriever" else self.app) + path
            return (await client.post(url, content=body, headers=JSON)).status_code, {status}
        if kind == "retrieve":
            r = await client.post(self.retriever + "/retrieve", json={"queries": self._titles(), "topk": 3})
            return r.status_code, {200}
        if kind == "invoke":
            r = await client.post(self.app + "/parallelsearch/invoke", json={"input": self._input()})
            return _answered(r), {200}
        if kind == "invoke_config_hash":
            url = f"{self.app}/parallelsearch/c/{self.hash}/invoke"
            return _answered(await client.post(url, json={"input": self._input()})), {200}
        if kind == "batch":
            body = {"inputs": [self._input() for _ in range(4)]}
            r = await client.post(self.app + "/sequential/batch", json=body)
            return r.status_code, {200}
        if kind == "stream":
            return await self._stream(client, {"input": self._input()}), {200}
        if kind == "stream_disconnect":
            body = {"input": self._input()}
            async with client.stream("POST", self.app + "/parallelsearch/stream", json=body) as r:
                async for _ in r.aiter_raw():
                    break  # the first chunk, then the client goes away mid-stream
            return r.status_code, {200}
        if kind == "bad_invoke_surrogate":
            q = "Who is older, Ed Wood \ud800 or Scott Derrickson?"
            body = json.dumps({"input": {"question": q, "metadata": SURROGATE_GOLD}})
            r = await client.post(self.app + "/parallelsearch/invoke", content=body.encode(), headers=JSON)
            return _answered(r), {200}
        if kind == "bad_invoke_empty":
            url = self.rng.choice(
                [self.app + "/parallelsearch/invoke", f"{self.app}/parallelsearch/c/{self.hash}/invoke"]
            )
            return (await client.post(url, json={"input": {"question": " "}})).status_code, {422}
        if kind == "bad_stream_surrogate":
            body = json.dumps({"input": {"question": "Ed Wood \udfff?", "metadata": SURROGATE_GOLD}}).encode()
            return await self._stream(client, None, content=body), {200}
        raise ValueError(kind)

    async def _stream(
        self, client: httpx.AsyncClient, body: dict | None, content: bytes | None = None
    ) -> int | str:
        kw: dict[str, Any] = {"json": body} if body is not None else {"content": content, "headers": JSON}
        async with client.stream("POST", self.app + "/parallelsearch/stream", **kw) as r:
            text = "".join([chunk async for chunk in r.aiter_text()])
        if r.status_code == 200 and ("event: end" not in text or "event: error" in text):
            return "stream without its end event"
        return r.status_code


def _answered(r: httpx.Response) -> int | str:
    if r.status_code == 200 and "answer" not in r.json().get("output", {}):
        return "200 without an answer"
    return r.status_code


async def drive(load: Load, tally: Tally, duration_s: float, concurrency: int, bar: tqdm) -> None:
    kinds, weights = list(MIX), list(MIX.values())
    t_end = time.monotonic() + duration_s
    t0 = time.monotonic()
    limits = httpx.Limits(max_connections=concurrency * 2, max_keepalive_connections=concurrency * 2)

    async def worker(client: httpx.AsyncClient) -> None:
        while time.monotonic() < t_end:
            kind = load.rng.choices(kinds, weights)[0]
            t = time.perf_counter()
            try:
                outcome, allowed = await load.send(client, kind)
            except (httpx.HTTPError, json.JSONDecodeError) as e:
                outcome, allowed = type(e).__name__, set()
            ms = (time.perf_counter() - t) * 1000
            tally.requests[kind] += 1
            tally.per_second[int(time.monotonic() - t0)] += 1
            if outcome in allowed and isinstance(outcome, int) and outcome < 400:
                tally.latency_ms[kind].append(ms)
            elif outcome in allowed:
                tally.expected_4xx[f"{kind}:{outcome}"] += 1
            else:
                tally.unexpected[f"{kind}:{outcome}"] += 1
            bar.update(1)

    async with httpx.AsyncClient(timeout=120, limits=limits) as client:
        await asyncio.gather(*(worker(client) for _ in range(concurrency)))


def run(
    duration_s: float = 600,
    concurrency: int = 16,
    n_questions: int = 60,
    warmup_s: float | None = None,
    seed: int = 0,
    name: str = "soak",
    write_results: bool = True,
    store_dir: Path | None = None,
    store_name: str = "soak",
    questions: list[dict] | None = None,
    server_env: dict[str, str] | None = None,
) -> dict:
    """Start both servers, drive the mix for ``duration_s``, stop them; the figures as a dict.

    ``store_dir``/``store_name``/``questions`` reuse an existing embedded store (tests);
    by default the store is built from the shipped HotpotQA sample's first ``n_questions``.
    ``server_env``: added to both servers' environment (``PYTHONPATH`` of the code before a change).
    """
    tmp = Path(tempfile.mkdtemp(prefix="soak-"))
    t_setup = time.perf_counter()
    store_dir, questions = soak_store(tmp, n_questions, store_dir, questions)
    servers = soak_servers(tmp, store_dir, store_name, server_env)
    retriever, app = servers
    warmup_s = warmup_s if warmup_s is not None else min(60.0, duration_s / 10)
    tally = Tally()
    rss: dict[str, list[tuple[float, float]]] = {s.name: [] for s in servers}
    try:
        for s in servers:
            s.start()
        setup_s = time.perf_counter() - t_setup
        rss_ready = {s.name: rss_mb(s) for s in servers}
        load = Load(retriever.url, app.url, questions, random.Random(seed))
        wall_s = drive_and_sample(load, tally, servers, rss, duration_s, concurrency)
        health = httpx.get(app.url + "/health", timeout=30).json()
        rss_end = {s.name: rss_mb(s) for s in servers}
    finally:
        for s in servers:
            s.stop()
    log_errors = log_error_counts(servers)
    shutil.rmtree(tmp, ignore_errors=True)
    result: dict[str, Any] = {
        "duration_s": round(wall_s, 1),
        "concurrency": concurrency,
        "setup_s": round(setup_s, 1),
        "passages_questions": len(questions),
        **request_figures(tally, wall_s),
        "admission_at_end": health.get("admission"),
        "server_log_errors": log_errors,
        "rss_mb": rss_figures(rss, rss_ready, rss_end, warmup_s),
        "warmup_s": warmup_s,
        "rss_series": rss,
        "requests_per_second_series": [tally.per_second[i] for i in range(int(wall_s) + 1)],
    }
    report(result)
    if write_results:
        write(name, result)
        plot(result, OUT / f"{name}.png")
    return result


def log_error_counts(servers: tuple[ServerProcess, ...]) -> dict[str, int]:
    """Unhandled errors and tracebacks in each server's log: a request answered well may still have
    left one there."""
    logs = {s.name: s.log.read_text(errors="replace") for s in servers}
    return {n: text.count("unhandled error") + text.count("Traceback") for n, text in logs.items()}


def soak_store(
    tmp: Path, n_questions: int, store_dir: Path | None, questions: list[dict] | None
) -> tuple[Path, list[dict]]:
    """The given store and its questions or, by default, a store of the shipped HotpotQA sample's
    first ``n_questions`` and their paragraphs, so the soak needs no downloaded data."""
    if store_dir is not None:
        if questions is None:
            raise ValueError("questions are needed with store_dir")
        return store_dir, questions
    from parallelsearch.data import load_questions

    lines = HOTPOTQA_SAMPLE.read_text(encoding="utf-8").splitlines()[:n_questions]
    store_dir = tmp / "chroma"
    _, src = records_store([json.loads(line) for line in lines], "soak", store_dir)
    return store_dir, load_questions(src, dataset="hotpotqa")


def soak_servers(
    tmp: Path, store_dir: Path, store_name: str, server_env: dict[str, str] | None = None
) -> tuple[ServerProcess, ServerProcess]:
    """``serve-retriever`` over the store and ``serve`` searching through it, not yet started, as
    the CLI runs them, so the soak drives the processes a user would run."""
    env = cli_env(tmp / "home", PARALLELSEARCH_CHROMA_PATH=str(store_dir), **(server_env or {}))
    kw = {"env": env, "start_timeout_s": 300}
    retriever = cli_server(
        "serve-retriever", "--store", store_name, name="serve-retriever", log=tmp / "retriever.log", **kw
    )
    app_args = ("serve", "--retriever", retriever.url + "/retrieve", "--checkpointer", "none")
    app = cli_server(*app_args, name="serve", log=tmp / "serve.log", **kw)
    return retriever, app


def drive_and_sample(
    load: Load,
    tally: Tally,
    servers: tuple[ServerProcess, ...],
    rss: dict[str, list[tuple[float, float]]],
    duration_s: float,
    concurrency: int,
) -> float:
    """Drive the mix for ``duration_s`` while sampling each server's RSS into ``rss`` about 120
    times, so memory growth can be read against time; the wall seconds taken."""
    t0 = time.monotonic()

    async def sample_rss(stop: asyncio.Event) -> None:
        while not stop.is_set():
            for s in servers:
                rss[s.name].append((round(time.monotonic() - t0, 1), round(rss_mb(s), 1)))
            try:
                await asyncio.wait_for(stop.wait(), timeout=max(1.0, duration_s / 120))
            except TimeoutError:
                pass

    async def main() -> None:
        stop = asyncio.Event()
        sampler = asyncio.create_task(sample_rss(stop))
        with tqdm(desc=f"soak {duration_s:g} s", unit="req", mininterval=2) as bar:
            await drive(load, tally, duration_s, concurrency, bar)
        stop.set()
        await sampler

    asyncio.run(main())
    return time.monotonic() - t0


def request_figures(tally: Tally, wall_s: float) -> dict[str, Any]:
    """Requests by kind, the expected refusals, the unexpected errors and the answered requests'
    latencies, the figures the soak's goals are read from."""
    good = [ms for k, xs in tally.latency_ms.items() for ms in xs]
    return {
        "requests": sum(tally.requests.values()),
        "requests_per_s": round(sum(tally.requests.values()) / wall_s, 2),
        "by_kind": dict(sorted(tally.requests.items())),
        "expected_4xx": dict(sorted(tally.expected_4xx.items())),
        "unexpected_errors": sum(tally.unexpected.values()),
        "unexpected_by_kind": dict(sorted(tally.unexpected.items())),
        **latency(good, 1),
        "latency_by_kind": {
            k: {"n": len(xs), **latency(xs, 1), "mean_ms": round(statistics.fmean(xs), 1)}
            for k, xs in sorted(tally.latency_ms.items())
        },
    }


def rss_figures(
    rss: dict[str, list[tuple[float, float]]],
    rss_ready: dict[str, float],
    rss_end: dict[str, float],
    warmup_s: float,
) -> dict[str, dict[str, float]]:
    """Each server's RSS when ready, after warm-up and at the end, and its growth since each, so a
    leak shows apart from warm-up's one-off growth."""

    def after(name: str, t: float) -> float:
        return next((v for at, v in rss[name] if at >= t), rss[name][-1][1])

    return {
        n: {
            "ready": round(rss_ready[n], 1),
            "after_warmup": round(after(n, warmup_s), 1),
            "end": round(rss_end[n], 1),
            "growth_pct_since_warmup": round(100 * (rss_end[n] / after(n, warmup_s) - 1), 2),
            "growth_pct_since_ready": round(100 * (rss_end[n] / rss_ready[n] - 1), 2),
        }
        for n in rss
    }


def report(r: dict) -> None:
    print(
        f"soak: {r['requests']} requests in {r['duration_s']} s ({r['requests_per_s']}/s, {r['concurrency']} clients); "
        f"unexpected errors {r['unexpected_errors']} {r['unexpected_by_kind'] or ''}; "
        f"expected 4xx {sum(r['expected_4xx'].values())}; p50 {r['p50_ms']} ms, p95 {r['p95_ms']} ms"
    )
    for kind, row in r["latency_by_kind"].items():
        print(
            f"  {kind:24s} n={row['n']:6d}  p50 {fmt(row['p50_ms'], '8.1f')} ms  p95 {fmt(row['p95_ms'], '8.1f')} ms"
        )
    for name, m in r["rss_mb"].items():
        print(
            f"  RSS {name:16s} ready {m['ready']:7.1f} MB, after warm-up {m['after_warmup']:7.1f} MB, "
            f"end {m['end']:7.1f} MB: {m['growth_pct_since_warmup']:+.1f}% since warm-up "
            f"({m['growth_pct_since_ready']:+.1f}% since ready)"
        )
    print(f"  admission at end: {r['admission_at_end']}; server log errors: {r['server_log_errors']}")


def plot(r: dict, path: Path) -> None:
    if (plt := pyplot()) is None:
        return
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(8, 6), sharex=True)
    for name, series in r["rss_series"].items():
        ax1.plot([t for t, _ in series], [v for _, v in series], label=name)
    ax1.axvline(r["warmup_s"], color="grey", ls=":", label="end of warm-up")
    ax1.set_ylabel("RSS (MB)")
    ax1.legend()
    ax1.set_title(
        f"soak: {r['requests']} requests, {r['unexpected_errors']} unexpected errors, p95 {r['p95_ms']} ms"
    )
    per_s = r["requests_per_second_series"]
    ax2.plot(range(len(per_s)), per_s, lw=0.6)
    ax2.set_ylabel("requests/s")
    ax2.set_xlabel("seconds")
    save(fig, path, dpi=120)


if __name__ == "__main__":
    ap = parser(__doc__)
    ap.add_argument("--duration", type=float, default=600, help="seconds of load")
    ap.add_argument("--concurrency", type=int, default=16, help="clients sending at once")
    ap.add_argument("--questions", type=int, default=60, help="HotpotQA sample questions to index")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--name", default="soak", help="results file name")
    a = ap.parse_args()
    res = run(a.duration, a.concurrency, a.questions, seed=a.seed, name=a.name)
    sys.exit(1 if res["unexpected_errors"] else 0)
