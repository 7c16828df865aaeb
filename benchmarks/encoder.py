"""Query encoding latency: the store's encoder vs plain sentence-transformers, 1/4/8 queries.

Three ways to embed the same k short queries with all-MiniLM-L6-v2 on CPU:

* ``st_main_thread``: a freshly loaded ``SentenceTransformer`` (untouched ``nn.Linear``
  layers), ``encode()`` on the calling thread;
* ``st_new_thread``: the same, each call on a new thread, as ``asyncio.to_thread`` from a
  fresh event loop does (what the coalescer did before the encoder thread existed);
* ``parallelsearch``: ``Embedder.encode_queries``: pre-transposed linear layers, the lean
  query path, every call on the one encoder thread.

Blocks of each variant alternate (several rounds), so a slow patch of a shared machine
hits them alike; medians per variant and k are printed, with ratios to ``st_main_thread``.
"""

from __future__ import annotations

import statistics
import threading
import time

import numpy as np
from _common import write
from tqdm import tqdm

from parallelsearch.stores.encoding.embedder import DEFAULT_MODEL, get_embedder, resolve_model_path

QUERIES = [
    "Scott Derrickson",
    "Ed Wood",
    "Moscow State University",
    "Tyler Bates",
    "Who directed Doctor Strange?",
    "Woodson, Arkansas",
    "Kiss and Tell 1945 film",
    "nationality of Ed Wood",
]
KS = (1, 4, 8)
ROUNDS = 5
PER_BLOCK = 8


def main() -> dict:
    from sentence_transformers import SentenceTransformer

    ours = get_embedder()
    plain = SentenceTransformer(resolve_model_path(DEFAULT_MODEL), device="cpu")

    def st_encode(texts):
        return plain.encode(texts, normalize_embeddings=True, convert_to_numpy=True, show_progress_bar=False)

    def on_new_thread(texts):
        out = {}
        t = threading.Thread(target=lambda: out.setdefault("v", st_encode(texts)))
        t.start()
        t.join(timeout=60)
        return out["v"]

    variants = {
        "st_main_thread": st_encode,
        "st_new_thread": on_new_thread,
        "parallelsearch": ours.encode_queries,
    }
    # same embeddings (up to float rounding), or the comparison means nothing
    diff = float(np.abs(ours.encode_queries(QUERIES) - st_encode(QUERIES)).max())
    samples: dict[tuple[str, int], list[float]] = {}
    for _ in tqdm(range(ROUNDS), desc="encoder benchmark"):
        for name, fn in variants.items():
            for k in KS:
                fn(QUERIES[:k])  # warm-up for this block
                for _ in range(PER_BLOCK):
                    t0 = time.perf_counter()
                    fn(QUERIES[:k])
                    samples.setdefault((name, k), []).append((time.perf_counter() - t0) * 1000)
            time.sleep(0.05)  # let the previous variant's idle threads go to sleep
    rows: dict = {name: {} for name in variants}
    for (name, k), v in samples.items():
        rows[name][k] = round(statistics.median(v), 2)
    for k in KS:
        base = rows["st_main_thread"][k]
        print(
            f"k={k}: sentence-transformers {base:6.1f} ms, on a new thread {rows['st_new_thread'][k]:6.1f} ms "
            f"({rows['st_new_thread'][k] / base:.2f}x), parallelsearch {rows['parallelsearch'][k]:6.1f} ms "
            f"({rows['parallelsearch'][k] / base:.2f}x)"
        )
    for name in variants:
        rows[name]["k4_over_k1"] = round(rows[name][4] / rows[name][1], 3)
    print(
        "k=4/k=1: "
        + ", ".join(f"{name} {rows[name]['k4_over_k1']}x" for name in variants)
        + f"; max embedding difference {diff:.1e}"
    )
    return write("encoder", {"rounds": ROUNDS, "per_block": PER_BLOCK, "max_abs_diff": diff, "ms": rows})


if __name__ == "__main__":
    main()
