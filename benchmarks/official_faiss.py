"""``serve-retriever --store-kind faiss`` against the official ``retrieval_server.py`` on the same
FAISS flat index, corpus and encoder: queries/s of closed-loop clients, the servers alternating
round by round.

The index and corpus are the FAISS store ``index --store-kind faiss`` writes from the 4,948 context
paragraphs of the 500 HotpotQA dev questions (all-MiniLM-L6-v2, 384-d, the packaged offline model);
the official server (ParallelSearch/Search-R1's ``search_r1/search/retrieval_server.py`` from
``--official CHECKOUT``, run unmodified: never vendored or downloaded, :mod:`_official`) is started on
those very two files with the same model folder (mean pooling, normalised, as it encodes any model
not named e5/bge/dpr). Both bind 127.0.0.1. The queries are the 500 questions; each request is one
query at top-3 with scores, as Search-R1's client sends. Figures: docs/performance.md, "The FAISS
store against the official server".
"""

from __future__ import annotations

import asyncio
import os
import statistics
import subprocess
import tempfile
from pathlib import Path

from _common import HOTPOT, alternating, parser, print_table, require, write
from _official import OfficialServer, top_k_agreement
from _server import CLI, ServerProcess, cli_env, cli_server
from retrieve_server import hotpot_questions, load

from parallelsearch.settings import Settings
from parallelsearch.stores.encoding.embedder import DEFAULT_MODEL, resolve_model_path

STORE = "hotpot500"
#: name: (clients, requests per client) of one round
LOADS = {"8 clients": (8, 25), "32 clients": (32, 8)}


def build_faiss_store(home: Path) -> tuple[Path, Path]:
    """The HotpotQA paragraphs indexed through the CLI into a FAISS store (a second run resumes:
    nothing is added); its index and corpus."""
    cmd = [*CLI, "index", str(require(HOTPOT)), "--store-kind", "faiss", "--store", STORE, "--no-progress"]
    subprocess.run(cmd, check=True, env=cli_env(home), cwd=home, timeout=3600)
    folder = Settings(home=home, store_kind="faiss").kind_folder() / STORE
    return folder / "index.faiss", folder / "corpus.jsonl"


def ours(home: Path) -> ServerProcess:
    args = ("serve-retriever", "--store-kind", "faiss", "--store", STORE)
    return cli_server(*args, env=cli_env(home), start_timeout_s=300)


def commit_of(checkout: Path) -> str:
    """The checkout's commit, or what is known without one."""
    got = subprocess.run(
        ["git", "-C", str(checkout), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=30
    )
    return got.stdout.strip() if got.returncode == 0 else "(not a git checkout)"


def one_round(servers: dict[str, ServerProcess], queries: list[str], name: str, r: int) -> dict:
    """Every load once against server ``name`` (the queries shifted by round, so no round repeats
    the last one's requests)."""
    srv = servers[name]
    shifted = queries[r * 37 % len(queries) :] + queries[: r * 37 % len(queries)]
    pid = srv.proc.pid
    return {
        load_name: asyncio.run(load(srv.url, clients, 1, each, shifted, server_pid=pid))
        for load_name, (clients, each) in LOADS.items()
    }


def summary(samples: dict[str, list[dict]]) -> dict:
    """Per server and load: the median over rounds of queries/s and of p50/p95, and the errors."""
    out: dict[str, dict] = {}
    for name, rounds in samples.items():
        out[name] = {}
        for load_name in LOADS:
            rows = [r[load_name] for r in rounds]
            out[name][load_name] = {
                key: round(statistics.median(row[key] for row in rows), 2)
                for key in ("queries_per_s", "p50_ms", "p95_ms", "server_cpu_ms_per_query")
            } | {"errors": sum(row["errors"] for row in rows), "queries_per_s_rounds": [
                round(row["queries_per_s"], 1) for row in rows
            ]}  # fmt: skip
    return out


def report(result: dict, servers: dict[str, ServerProcess]) -> None:
    """The table, and each load's ratio of queries/s (none where the official server answered nothing)."""
    rows = []
    for load_name in LOADS:
        theirs = result["official"][load_name]["queries_per_s"]
        ratio = result["ours"][load_name]["queries_per_s"] / theirs if theirs else None
        result.setdefault("ours_over_official", {})[load_name] = None if ratio is None else round(ratio, 2)
        for name in servers:
            row = result[name][load_name]
            rows.append([load_name, name, f"{row['queries_per_s']:.1f}", f"{row['p50_ms']:.1f}",
                         f"{row['p95_ms']:.1f}", f"{row['server_cpu_ms_per_query']:.2f}", str(row["errors"])])  # fmt: skip
    print_table(["load", "server", "queries/s", "p50 ms", "p95 ms", "server CPU ms/query", "errors"], rows)
    print(f"ours / official queries/s: {result['ours_over_official']}")


def main() -> None:
    p = parser(__doc__)
    p.add_argument(
        "--official",
        type=Path,
        default=os.environ.get("PARALLELSEARCH_OFFICIAL_CHECKOUT"),
        help="a ParallelSearch/Search-R1 checkout (default: $PARALLELSEARCH_OFFICIAL_CHECKOUT)",
    )
    p.add_argument("--rounds", type=int, default=6, help="rounds; each runs every load on each server")
    p.add_argument("--home", type=Path, help="the home of the FAISS store (default: a new temporary one)")
    args = p.parse_args()
    if args.official is None:  # `make bench` runs every script: this one needs what is not shipped
        print("skipped: no official checkout (--official CHECKOUT or PARALLELSEARCH_OFFICIAL_CHECKOUT)")
        return
    if not (args.official / "search_r1" / "search" / "retrieval_server.py").is_file():
        p.error(f"--official {args.official}: no search_r1/search/retrieval_server.py in it")
    with tempfile.TemporaryDirectory(prefix="official-faiss-") as tmp:
        home = args.home or Path(tmp)
        files = build_faiss_store(home)
        queries = hotpot_questions()
        model = resolve_model_path(DEFAULT_MODEL)
        servers = {"ours": ours(home), "official": OfficialServer(args.official, home, model, files=files)}
        with servers["ours"], servers["official"]:
            for srv in servers.values():  # warm: the first requests load what each loads lazily
                asyncio.run(load(srv.url, 4, 1, 10, queries))
            agreement = top_k_agreement(servers["ours"].url, servers["official"].url, queries[:200])
            samples = alternating(
                servers, range(args.rounds), lambda name, r: one_round(servers, queries, name, r)
            )
    result = summary(samples)
    report(result, servers)
    print(
        f"top-3 ids in common (200 questions, same index, ONNX fp32 vs torch fp32 encoder): {agreement:.3f}"
    )
    write("official_faiss", {"official_script": str(servers["official"].script),
          "official_commit": commit_of(args.official), "rounds": args.rounds, "loads": LOADS,
          "top3_agreement": round(agreement, 4), **result})  # fmt: skip


if __name__ == "__main__":
    main()
