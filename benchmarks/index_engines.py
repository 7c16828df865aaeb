"""``parallelsearch index`` with the default engine against ``--encoder-backend torch``.

The CLI in a fresh process per run into a fresh store, engines alternating round by round:
the CLI's own passages/s and the whole command's wall time, and whether both stores answer the
same top-3 for 50 questions. Queries are measured by ``retrieve_server.py``.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from _common import HOTPOT, RAW, alternating, parser, require, write
from _server import CLI, cli_env
from tqdm import tqdm

CORPUS = RAW / "wiki_corpus" / "RUC-NLPIR_FlashRAG" / "sample_data.jsonl"
ENGINES = {"default (auto)": [], "torch": ["--encoder-backend", "torch"]}


def index_once(corpus: Path, home: Path, flags: list[str]) -> dict:
    """One ``index`` run in a fresh process: the CLI's passages/s and the command's wall time."""
    cmd = [*CLI, "index", str(corpus), "--store", "bench"]
    env = cli_env(home)
    env.setdefault("PARALLELSEARCH_MODEL_CACHE_DIR", str(home.parent / "models"))  # export once
    t0 = time.perf_counter()
    done = subprocess.run(
        [*cmd, *flags, "--no-progress"], env=env, cwd=home, capture_output=True, text=True, timeout=3600
    )
    wall = time.perf_counter() - t0
    if done.returncode != 0:
        raise RuntimeError(f"index {' '.join(flags) or '(default)'} failed: {done.stderr[-2000:]}")
    rate = re.search(r"([\d.]+) passages/s", done.stdout)
    if rate is None:
        raise RuntimeError(f"no passages/s in the index summary: {done.stdout[-500:]!r}")
    return {"passages_per_s": float(rate.group(1)), "wall_s": wall}


def top3(home: Path, questions: list[str]) -> list[list[str]]:
    from parallelsearch.stores import ChromaStore

    store = ChromaStore("bench", path=home / "chroma", create=False)
    return [[p.id for p in hits] for hits in store.search_batch(questions, 3)]


def main(argv: list[str] | None = None) -> dict:
    ap = parser(__doc__)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--passages", type=int, default=1000, help="first N passages of the FlashRAG wiki sample")
    args = ap.parse_args(argv)
    root = Path(tempfile.mkdtemp(prefix="index-engines-"))
    corpus = root / "corpus.jsonl"
    with require(CORPUS).open(encoding="utf-8") as src:
        corpus.write_text("".join(itertools.islice(src, args.passages)), encoding="utf-8")
    index_once(corpus, root / "warm", ENGINES["default (auto)"])  # the ONNX export, once, untimed
    homes = {name: [root / f"{name.split()[0]}-{r}" for r in range(args.rounds)] for name in ENGINES}
    runs = alternating(
        ENGINES,
        tqdm(range(args.rounds), desc="rounds"),
        lambda name, r: index_once(corpus, homes[name][r], ENGINES[name]),
    )
    questions = [q["question"] for q in json.loads(HOTPOT.read_text())[:50]] if HOTPOT.is_file() else []
    answers = {name: top3(home[-1], questions) for name, home in homes.items()}
    agree = statistics.mean(a == b for a, b in zip(*answers.values(), strict=True)) if questions else None
    rows = {
        name: {k: statistics.median(run[k] for run in rs) for k in ("passages_per_s", "wall_s")}
        for name, rs in runs.items()
    }
    base = rows["torch"]
    for name, row in rows.items():
        print(
            f"{name:15s}: {row['passages_per_s']:6.1f} passages/s "
            f"({row['passages_per_s'] / base['passages_per_s']:.2f}x torch), command {row['wall_s']:.1f} s"
        )
    if agree is not None:
        print(f"top-3 ids of 50 HotpotQA questions, default vs torch store: {agree:.2f} identical")
    data = {
        "passages": args.passages,
        "rounds": args.rounds,
        "cores": os.cpu_count(),
        "engines": rows,
        "default_over_torch": rows["default (auto)"]["passages_per_s"] / base["passages_per_s"],
        "top3_identical": agree,
    }
    write("index_engines", data)
    shutil.rmtree(root, ignore_errors=True)
    return data


if __name__ == "__main__":
    main()
