"""Query encoders side by side: queries/s at batch 1/8/32 against the fp32 torch encoder, and recall@3.

Encoders alternate round by round on the same HotpotQA questions; recall@3 (``--no-recall``
skips it) is one query per gold supporting title of every comparison question, one store per
embedding family. The rule: int8 may be the default only if its recall@3 is less than 0.005
below torch's. Figures: docs/performance.md, "Encoder backends".
"""

from __future__ import annotations

import json
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
from _common import HOTPOT, ROOT, parser, plain_encoder, plot_bars, write
from tqdm import tqdm

from parallelsearch.stores import ChromaStore, ingest
from parallelsearch.stores.encoding.embedder import Embedder

BACKENDS = ("torch", "onnx", "onnx-int8")
PLAIN = "sentence-transformers"
ROUNDS = 5


def speed(encoders: dict, queries: list[str], batches: list[int]) -> dict:
    """Median ms per call of each encoder at each batch size, blocks alternating round by round."""
    samples: dict = {}
    for _ in tqdm(range(ROUNDS), desc="speed rounds"):
        for name, encode in encoders.items():
            for b in batches:
                encode(queries[:b])
                for i in range(max(3, 32 // b)):
                    chunk = [queries[(i * b + j) % len(queries)] for j in range(b)]
                    t0 = time.perf_counter()
                    encode(chunk)
                    samples.setdefault((name, b), []).append(time.perf_counter() - t0)
            time.sleep(0.05)  # let the previous encoder's idle threads go to sleep
    return {name: {b: statistics.median(samples[(name, b)]) * 1000 for b in batches} for name in encoders}


def recall(embedders: dict[str, Embedder], recs: list[dict], tmp: Path) -> dict:
    """recall@3 per backend. The torch and onnx rows share one store indexed with ONNX fp32 (the
    same embeddings to 1e-5, indexed several times faster than torch's spinning OpenMP threads)."""
    gold = [
        t
        for r in recs
        if r["type"] == "comparison"
        for t in dict.fromkeys(t for t, _ in r["supporting_facts"])
    ]
    out = {}
    stores: dict[str, ChromaStore] = {}
    for name, emb in embedders.items():
        family = "int8" if name == "onnx-int8" else "fp32"
        t0 = time.perf_counter()
        if family not in stores:
            fp32 = embedders.get("onnx") or Embedder(backend="onnx", cache_dir=tmp / "models")
            index_with = emb if family == "int8" else fp32
            stores[family] = ChromaStore(f"hp-{family}", path=tmp / family, embedder=index_with)
            ingest(stores[family], [HOTPOT], progress=True)
        index_s = time.perf_counter() - t0
        store = ChromaStore(f"hp-{family}", client=stores[family].client, embedder=emb, create=False)
        hits = store.search_batch(gold, 3)
        found = sum(t in {p.title for p in h} for t, h in zip(gold, hits, strict=True))
        out[name] = {
            "recall3": round(found / len(gold), 4),
            "index_s": round(index_s, 1),
            "passages": store.count(),
        }
    return {"gold_titles": len(gold), **out}


def main() -> dict:
    ap = parser(__doc__)
    ap.add_argument("--encoders", nargs="+", choices=(*BACKENDS, PLAIN), default=list(BACKENDS))
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 8, 32])
    ap.add_argument("--no-recall", action="store_true", help="speed only (no stores are indexed)")
    args = ap.parse_args()
    recs = json.loads(HOTPOT.read_text())
    tmp = Path(tempfile.mkdtemp(prefix="encoder-backends-"))
    embedders = {
        b: Embedder(backend=b, cache_dir=tmp / "models", workers=1) for b in args.encoders if b != PLAIN
    }
    encoders = {name: emb.encode_queries for name, emb in embedders.items()}
    if PLAIN in args.encoders:
        encoders[PLAIN] = plain_encoder()
    queries = [r["question"] for r in recs]
    first, *others = encoders
    diff = {n: float(np.abs(encoders[n](queries[:8]) - encoders[first](queries[:8])).max()) for n in others}
    ms = speed(encoders, queries, args.batches)
    qps = {name: {b: round(b * 1000 / t, 1) for b, t in row.items()} for name, row in ms.items()}
    for name, row in ms.items():
        ratio = ", ".join(
            f"batch {b} {qps[name][b]:.0f} q/s, {t:.1f} ms ({t / ms[first][b]:.2f}x the time)"
            for b, t in row.items()
        )
        print(
            f"{name:9s}: {ratio}" + (f"; max embedding difference {diff[name]:.1e}" if name in diff else "")
        )
    data = {"rounds": ROUNDS, "baseline": first, "queries_per_s": qps, "max_abs_diff_vs_baseline": diff}
    if not args.no_recall and embedders:
        rec = data["recall"] = recall(embedders, recs, tmp)
        base = rec[next(iter(embedders))]["recall3"]
        for name in embedders:
            r = rec[name]
            print(
                f"{name:9s}: recall@3 {r['recall3']:.4f} ({r['recall3'] - base:+.4f}) on {rec['gold_titles']} "
                f"gold titles; indexing {r['passages']} passages {r['index_s']} s"
            )
        if "onnx-int8" in rec and "torch" in rec:
            drop = data["int8_drop"] = round(rec["torch"]["recall3"] - rec["onnx-int8"]["recall3"], 4)
            print(
                f"int8 recall@3 drop {drop:+.4f}: {'may' if drop < 0.005 else 'may NOT'} be the default (< 0.005)"
            )
        plot_bars(
            ROOT / "docs" / "img" / "encoder_backends.png",
            "query encoder queries/s by batch size (recall@3: "
            + ", ".join(f"{n} {rec[n]['recall3']:.3f}" for n in embedders)
            + ")",
            {f"batch {b}": {n: qps[n][b] for n in encoders} for b in args.batches},
            "queries/s",
        )
    return write("encoder_backends" if set(args.encoders) <= set(BACKENDS) else "encoder", data)


if __name__ == "__main__":
    main()
