"""The reliability suite the next change to the servers or stores runs: both servers and a store as
real processes on 127.0.0.1, each part side by side with the code before a change (``--baseline
DIR``, a ``git archive`` of it), alternating which goes first.

- ``soak``: the soak mix (benchmarks/soak.py), 16 clients for 120 s: errors, p50/p95, RSS.
- ``slow``: 20 clients ask ``/retrieve`` for a 7 MB answer and read nothing: RSS before, at the
  peak and ``send timeout + 5 s`` later, and how many of their connections are still open.
- ``shared``: two ``serve`` on one SQLite threads file (the second refused, or 2 x 2 concurrent
  runs on one thread and the episodes the thread kept), 10 tries; two ``serve-retriever`` on one
  store answering alike.
- ``kill``: ``index`` killed with SIGKILL mid-write, then the same command again: it finishes,
  no passage twice, every vector reads back.

Figures: docs/performance.md, "Servers and stores that share a disk".
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import soak
from _common import parser, records_store, write
from _server import CLI, ServerProcess, cli_env, cli_server
from retrieve_server import baseline_overlay

from parallelsearch.demo_data import HOTPOTQA_SAMPLE

SLOW_CLIENTS = 20
SEND_TIMEOUT_S = 10.0
BIG_QUERY = {"queries": [f"film director born in {i}" for i in range(256)], "topk": 50}


def sample_records(n: int) -> list[dict]:
    lines = HOTPOTQA_SAMPLE.read_text(encoding="utf-8").splitlines()[:n]
    return [json.loads(line) for line in lines]


def code_env(overlay: Path | None) -> dict[str, str]:
    """The environment that runs the code before a change (its overlay first on the path), or none."""
    return {"PYTHONPATH": str(overlay)} if overlay is not None else {}


def alternating(codes: dict[str, Path | None], rounds: int, part: Callable[[Path | None], dict]) -> dict:
    """``part(overlay)`` for each code, ``rounds`` times, the first code going first in even rounds."""
    names = list(codes)
    out: dict[str, list[dict]] = {n: [] for n in names}
    for r in range(rounds):
        for name in names if r % 2 == 0 else names[::-1]:
            print(f"-- round {r + 1}: {name}", flush=True)
            out[name].append(part(codes[name]))
    return out


# ---- soak ---------------------------------------------------------------------------------------------
def soak_part(overlay: Path | None, duration_s: float, concurrency: int) -> dict:
    r = soak.run(duration_s, concurrency, 60, write_results=False, name="soak", server_env=code_env(overlay))
    keep = ("requests", "requests_per_s", "unexpected_errors", "p50_ms", "p95_ms", "server_log_errors")
    return {**{k: r[k] for k in keep}, "rss_mb": r["rss_mb"], "load": os.getloadavg()[0]}


# ---- clients that stop reading --------------------------------------------------------------------------
def rss_of(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def stalled_client(port: int) -> socket.socket:
    """A connection that asks for the 7 MB answer and reads nothing (a small receive buffer)."""
    body = json.dumps(BIG_QUERY).encode()
    head = (
        f"POST /retrieve HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    )
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(("127.0.0.1", port))
    sock.sendall(head.encode() + body)
    return sock


def peek(sock: socket.socket) -> str:
    """``data`` (the answer started), ``waiting`` or ``closed``, without reading anything: the
    kernel's TCP state says closed (a reset or a FIN) even while unread data waits."""
    state = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 8)[0]
    if state in (7, 8):  # TCP_CLOSE, TCP_CLOSE_WAIT
        return "closed"
    sock.setblocking(False)
    try:
        return "data" if sock.recv(1, socket.MSG_PEEK) else "closed"
    except BlockingIOError:
        return "waiting"
    except OSError:
        return "closed"


def watch_stalled(socks: list[socket.socket], pid: int, limit_s: float = 600) -> dict:
    """Poll the stalled connections: when each got its first bytes and when the server closed it;
    the RSS ``send timeout + 5 s`` after the last one's answer started (at most ``limit_s``)."""
    first: list[float | None] = [None] * len(socks)
    closed: list[float | None] = [None] * len(socks)
    t0, peak = time.monotonic(), rss_of(pid)
    while time.monotonic() - t0 < limit_s:
        now = time.monotonic() - t0
        for i, s in enumerate(socks):
            state = peek(s)
            first[i] = first[i] if first[i] is not None or state != "data" else now
            closed[i] = closed[i] if closed[i] is not None or state != "closed" else now
        peak = max(peak, rss_of(pid))
        started = [f for f in first if f is not None]
        if len(started) == len(socks) and now >= max(started) + SEND_TIMEOUT_S + 5:
            break
        time.sleep(0.25)
    held = [c - f for f, c in zip(first, closed, strict=True) if f is not None and c is not None]
    return {
        "rss_peak_mb": round(peak, 1),
        "rss_at_send_timeout_plus_5s_mb": round(rss_of(pid), 1),
        "answers_started": sum(f is not None for f in first),
        "connections_open_at_send_timeout_plus_5s": sum(c is None for c in closed),
        "longest_stall_before_close_s": round(max(held), 1) if held else None,
    }


def slow_part(overlay: Path | None, store_dir: Path, tmp: Path) -> dict:
    env = cli_env(tmp / "home-slow", PARALLELSEARCH_CHROMA_PATH=str(store_dir), **code_env(overlay))
    env["PARALLELSEARCH_SERVER_SEND_TIMEOUT_S"] = str(SEND_TIMEOUT_S)
    with cli_server("serve-retriever", "--store", "soak", env=env, start_timeout_s=300) as srv:
        assert srv.proc is not None
        httpx.post(srv.url + "/retrieve", json=BIG_QUERY, timeout=600).raise_for_status()  # warm
        start = rss_of(srv.proc.pid)
        socks = [stalled_client(srv.port) for _ in range(SLOW_CLIENTS)]
        seen = watch_stalled(socks, srv.proc.pid)
        for s in socks:
            s.close()
        answers = httpx.post(srv.url + "/retrieve", json={"queries": ["Ed Wood"]}, timeout=120).status_code
    after = seen["rss_at_send_timeout_plus_5s_mb"]
    return {
        "rss_start_mb": round(start, 1),
        **seen,
        "rss_after_vs_start_pct": round(100 * (after / start - 1), 2),
        "serves_after": answers,
    }


# ---- two servers on one threads file and one store --------------------------------------------------------
def serve_app(env: dict[str, str], retriever: str, threads: Path, name: str) -> ServerProcess:
    args = ("serve", "--retriever", retriever, "--policy", "oracle", "--checkpoint-url", str(threads))
    return cli_server(*args, env=env, name=name, start_timeout_s=300)


def second_server(env: dict[str, str], retriever: str, threads: Path) -> ServerProcess | str:
    """The second ``serve`` on ``threads``: running, or the line it was refused with."""
    srv = serve_app(env, retriever, threads, "serve B")
    try:
        return srv.start()
    except Exception:  # noqa: BLE001 - a refused server exits; its log says why
        lines = [x for x in srv.tail().splitlines() if x.strip()]
        srv.stop()
        return lines[-1] if lines else "exited"


def four_runs(urls: list[str], thread: str, record: dict) -> int:
    """Two concurrent runs through each server on one thread; the episodes the thread kept."""
    import concurrent.futures as cf

    body = {
        "input": {"question": record["question"], "metadata": {"golden_answers": record["answer"]}},
        "config": {"configurable": {"thread_id": thread}},
    }
    with cf.ThreadPoolExecutor(4) as pool:
        codes = list(
            pool.map(lambda u: httpx.post(u + "/parallelsearch/invoke", json=body, timeout=300), urls * 2)
        )
    assert all(r.status_code == 200 for r in codes), [r.text[:200] for r in codes]
    return httpx.get(f"{urls[0]}/parallelsearch/threads/{thread}", timeout=60).json()["episodes"]


def shared_part(overlay: Path | None, store_dir: Path, tmp: Path, tries: int) -> dict:
    home = Path(tempfile.mkdtemp(dir=tmp, prefix="shared-"))
    env = cli_env(home, PARALLELSEARCH_CHROMA_PATH=str(store_dir), **code_env(overlay))
    threads = home / "threads.sqlite"
    record = json.loads(HOTPOTQA_SAMPLE.read_text(encoding="utf-8").splitlines()[0])
    record["answer"] = [record["answer"]] if isinstance(record["answer"], str) else record["answer"]
    outcomes: list[Any] = []
    with (
        cli_server("serve-retriever", "--store", "soak", env=env, start_timeout_s=300) as r1,
        cli_server("serve-retriever", "--store", "soak", env=env, start_timeout_s=300) as r2,
    ):
        same = [
            httpx.post(r.url + "/retrieve", json={"queries": ["Ed Wood"]}, timeout=120).json()
            for r in (r1, r2)
        ]
        with serve_app(env, r1.url + "/retrieve", threads, "serve A") as a:
            for i in range(tries):
                b = second_server(env, r2.url + "/retrieve", threads)
                if isinstance(b, str):
                    outcomes.append({"refused": b[:300]})
                    continue
                try:
                    outcomes.append({"episodes_kept_of_4": four_runs([a.url, b.url], f"try-{i}", record)})
                finally:
                    b.stop()
    kept = sum(o.get("episodes_kept_of_4") == 4 for o in outcomes)
    refused = sum("refused" in o for o in outcomes)
    return {"tries": outcomes, "ok": kept + refused, "of": tries, "two_retrievers_agree": same[0] == same[1]}


# ---- kill -9 during a write --------------------------------------------------------------------------------
def kill_part(overlay: Path | None, tmp: Path) -> dict:
    home = Path(tempfile.mkdtemp(dir=tmp, prefix="kill-"))
    env = cli_env(home, **code_env(overlay))
    records = sample_records(60)
    src = home / "passages.jsonl"
    passages = {(t, " ".join(s)) for r in records for t, s in r["context"]}
    src.write_text("".join(json.dumps({"title": t, "text": x}) + "\n" for t, x in sorted(passages)))
    cmd = [*CLI, "index", "--store", "killed", "--no-progress", "--chunk-size", "64", str(src)]
    proc = subprocess.Popen(cmd, env=env, cwd=home, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    sqlite = home / "chroma" / "chroma.sqlite3"
    t0, first = time.monotonic(), None
    while proc.poll() is None:  # until about three chunks are committed
        size = sqlite.stat().st_size if sqlite.exists() else None
        first = first if first is not None or size is None else size
        if size is not None and size - first > 400_000:
            break
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    killed_after_s = round(time.monotonic() - t0, 1)
    again = subprocess.run(cmd, env=env, cwd=home, capture_output=True, text=True, timeout=3600)
    check = subprocess.run(
        [*CLI, "stores", "--check", "killed"], env=env, cwd=home, capture_output=True, text=True, timeout=1800
    )
    summary = next((x for x in again.stdout.splitlines() if "added " in x), again.stderr[-300:])
    return {
        "passages": len(passages),
        "killed_after_s": killed_after_s,
        "rerun_exit": again.returncode,
        "rerun": summary,
        "check_exit": check.returncode,
        "check": check.stdout.strip()[-300:],
    }


def main() -> int:
    ap = parser(__doc__)
    ap.add_argument(
        "--baseline", type=Path, help="a checkout of the code before (git archive COMMIT | tar -x -C DIR)"
    )
    ap.add_argument("--parts", default="soak,slow,shared,kill", help="comma list of soak, slow, shared, kill")
    ap.add_argument("--duration", type=float, default=120, help="seconds of the soak")
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=1, help="soak rounds per code (the order alternates)")
    ap.add_argument("--tries", type=int, default=10, help="tries of two servers on one threads file")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="reliability-"))
    codes: dict[str, Path | None] = {"this checkout": None}
    if args.baseline:
        codes["before"] = baseline_overlay(args.baseline, tmp / "baseline-src")
    _, _ = records_store(sample_records(60), "soak", tmp / "chroma")
    parts = set(args.parts.split(","))
    out: dict[str, Any] = {"load_at_start": os.getloadavg()}
    if "slow" in parts:
        out["slow"] = alternating(codes, 1, lambda o: slow_part(o, tmp / "chroma", tmp))
    if "shared" in parts:
        out["shared"] = alternating(codes, 1, lambda o: shared_part(o, tmp / "chroma", tmp, args.tries))
    if "kill" in parts:
        out["kill"] = alternating(codes, 1, lambda o: kill_part(o, tmp))
    if "soak" in parts:
        out["soak"] = alternating(codes, args.rounds, lambda o: soak_part(o, args.duration, args.concurrency))
        out["soak_p95_ratio"] = p95_ratio(out["soak"])
    out["load_at_end"] = os.getloadavg()
    print(json.dumps(out, indent=1, default=str))
    write("reliability", out)
    return 0


def p95_ratio(rows: dict[str, list[dict]]) -> float | None:
    """This checkout's median p95 over the code before's (None without a baseline)."""
    import statistics

    if "before" not in rows:
        return None
    med = {k: statistics.median(r["p95_ms"] for r in v) for k, v in rows.items()}
    return round(med["this checkout"] / med["before"], 3)


if __name__ == "__main__":
    sys.exit(main())
