"""What importing the graph module ``langgraph.json`` names costs, with the stores opened at import
(eager: how ``langgraph_app`` built its graphs before) and at the first search (deferred: how it
builds them now), side by side over one real store.

1. Fresh child processes, the variants alternating: the import (or the eager module body), the first
   run (the deferred one opens the store there), a second run, and which heavy packages the import
   loaded.
2. With ``--dev`` (needs the ``langgraph`` extra): the real ``langgraph dev`` over each variant, the
   server's own import figure and whether it logged its slow-import warning (over 3 s), then one run
   through ``langgraph_sdk``.
"""

from __future__ import annotations

import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import ROOT, parser, print_table, write
from _server import BIN, OFFLINE, ServerProcess

from parallelsearch.stores.http.loopback import free_port

KINDS = ["parallel", "sequential", "rag", "dag"]
QUESTION = "Between Greyia and Calibanus, which has more species?"
SCRIPT = ["<search> Greyia ## Calibanus </search>", "<answer> Greyia </answer>"]
HEAVY = ["chromadb", "torch", "sentence_transformers", "onnxruntime", "transformers"]
#: the module body of each variant: ``graph`` is the parallel graph
BODIES = {
    "eager": (
        "from parallelsearch.settings import get_settings\n"
        f"_parts = get_settings().graph_parts({KINDS!r})\n"
        f"graph, sequential, rag, dag = (_parts.graph(k) for k in {KINDS!r})\n"
    ),
    "deferred": "from parallelsearch.langgraph_app import graph, sequential, rag, dag\n",
}
CHILD = """
import json, sys, time
t0 = time.perf_counter()
import {module} as app
t1 = time.perf_counter()
heavy = sorted(m for m in {heavy!r} if m in sys.modules)
runs = []
for _ in range(2):
    t = time.perf_counter()
    out = app.graph.invoke({{"question": {question!r}}})
    runs.append(time.perf_counter() - t)
    assert out["answer"] == "Greyia" and out["errors"] == 0, out
print(json.dumps({{"import_s": t1 - t0, "first_run_s": runs[0], "second_run_s": runs[1], "heavy": heavy}}))
"""


def make_store(home: Path) -> dict[str, str]:
    """A real store of the shipped HotpotQA sample's first 20 questions under ``home`` (built by the
    CLI, as ``make demo`` builds its store), and the environment every child gets."""
    from parallelsearch.demo_data import HOTPOTQA_SAMPLE

    sample = home / "sample20.jsonl"
    sample.write_text("\n".join(HOTPOTQA_SAMPLE.read_text().splitlines()[:20]) + "\n")
    (home / "turns.json").write_text(json.dumps(SCRIPT))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PARALLELSEARCH_", "LANGSMITH_"))}
    env.update(OFFLINE, PARALLELSEARCH_HOME=str(home), PARALLELSEARCH_STORES="sample")
    env.update(PARALLELSEARCH_POLICY=f"scripted:{home / 'turns.json'}", PYTHONPATH=str(home))
    cmd = [sys.executable, "-m", "parallelsearch.cli", "index", "--store", "sample", str(sample)]
    subprocess.run(cmd, env=env, cwd=home, check=True, capture_output=True, timeout=900)
    for name, body in BODIES.items():
        (home / f"app_{name}.py").write_text(body)
    return env


def child_sample(variant: str, env: dict[str, str], home: Path) -> dict:
    code = CHILD.format(module=f"app_{variant}", heavy=HEAVY, question=QUESTION)
    proc = subprocess.run([sys.executable, "-c", code], env=env, cwd=home, capture_output=True, text=True,
                          timeout=900)  # fmt: skip
    if proc.returncode != 0:
        sys.exit(f"{variant} child failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def dev_sample(variant: str, env: dict[str, str], home: Path) -> dict:
    """``langgraph dev`` over the variant's module: the server's import figure, its warning, one run."""
    from langgraph_sdk import get_sync_client

    config = home / f"langgraph_{variant}.json"
    graphs = {"parallelsearch": f"{home / f'app_{variant}.py'}:graph"}
    config.write_text(json.dumps({"dependencies": [str(ROOT)], "graphs": graphs, "env": {}}))
    port = free_port()
    extra = {"LANGGRAPH_CLI_NO_ANALYTICS": "1", "LANGGRAPH_NO_VERSION_CHECK": "true", "PYTHONUNBUFFERED": "1"}
    cmd = [str(BIN / "langgraph"), "dev", "--no-browser", "--no-reload", "--host", "127.0.0.1",
           "--port", str(port), "--config", str(config)]  # fmt: skip
    srv = ServerProcess(cmd, env={**env, **extra}, cwd=home, log=home / f"dev_{variant}.log", port=port,
                        ready_path="/ok")  # fmt: skip
    srv.start()
    try:
        client = get_sync_client(url=srv.url, api_key=None, timeout=300)
        t0 = time.perf_counter()
        out = client.runs.wait(None, "parallelsearch", input={"question": QUESTION})
        first_run_s = time.perf_counter() - t0
        assert out["answer"] == "Greyia", out
    finally:
        srv.kill(signal.SIGTERM)
    log = re.sub(r"\x1b\[[0-9;]*m", "", srv.log.read_text(errors="replace"))
    found = re.search(r"elapsed_seconds=([0-9.e-]+) graph_id=parallelsearch ", log)
    return {
        "ready_s": srv.ready_s,
        "server_import_s": float(found.group(1)) if found else None,
        "slow_import_warning": "Graph import exceeded the expected startup time" in log,
        "slow_graph_load_warning": "Slow graph load" in log,
        "first_run_s": first_run_s,
    }


def main() -> dict:
    ap = parser(__doc__)
    ap.add_argument("--reps", type=int, default=3, help="child processes per variant")
    ap.add_argument("--dev", action="store_true", help="also run the real langgraph dev over each variant")
    args = ap.parse_args()
    if args.reps < 1:
        sys.exit("--reps must be at least 1")
    home = Path(tempfile.mkdtemp(prefix="lg-import-"))
    env = make_store(home)
    samples: dict[str, list[dict]] = {v: [] for v in BODIES}
    for r in range(args.reps):  # alternating, so neither variant always runs first
        for v in list(BODIES) if r % 2 == 0 else list(reversed(BODIES)):
            samples[v].append(child_sample(v, env, home))
    summary = {
        v: {
            key: round(statistics.median(s[key] for s in rows), 3)
            for key in ("import_s", "first_run_s", "second_run_s")
        }
        | {"heavy_after_import": rows[0]["heavy"]}
        for v, rows in samples.items()
    }
    rows = [[v, f"{s['import_s']:.2f}", f"{s['first_run_s']:.2f}", f"{s['second_run_s']:.3f}",
             ",".join(s["heavy_after_import"]) or "-"] for v, s in summary.items()]  # fmt: skip
    print_table(["variant", "import s", "first run s", "second run s", "loaded by the import"], rows)
    ratio = summary["eager"]["import_s"] / summary["deferred"]["import_s"]
    print(f"import: eager / deferred = {ratio:.1f}x (median of {args.reps} fresh processes each)")
    data = {"reps": args.reps, "summary": summary, "import_ratio": round(ratio, 2), "samples": samples}
    if args.dev:
        dev = {v: dev_sample(v, env, home) for v in BODIES}
        for v, d in dev.items():
            print(f"langgraph dev {v}: import {d['server_import_s']:.2f} s, warning {d['slow_import_warning']}, "
                  f"first run {d['first_run_s']:.2f} s")  # fmt: skip
        data["langgraph_dev"] = dev
    return write("langgraph_import", data)


if __name__ == "__main__":
    main()
