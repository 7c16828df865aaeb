"""Ingestion throughput into a store vs raw sentence-transformers encode of the same passages,
same batch size, same run (ratio; goal >= 0.95)."""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

from _common import RAW, write
from parallelsearch.stores import ChromaStore, get_embedder, ingest, read_passages

N = 1000
BATCH = 32


def main() -> dict:
    passages = list(read_passages([RAW / "wiki_corpus/RUC-NLPIR_FlashRAG/sample_data.jsonl"]))[:N]
    emb = get_embedder()
    emb.encode_passages([p.text for p in passages[:64]], batch_size=BATCH)  # warm-up
    t0 = time.perf_counter()
    emb.encode_passages([p.text for p in passages], batch_size=BATCH)
    raw_s = time.perf_counter() - t0
    store = ChromaStore("ingest-bench", path=Path(tempfile.mkdtemp()), embedder=emb)
    rep = ingest(store, passages=passages, batch_size=BATCH, progress=False)
    raw_ps, ing_ps = len(passages) / raw_s, rep.passages_per_s
    print(
        f"raw encode {raw_ps:.1f} passages/s, ingest {ing_ps:.1f} passages/s, ratio {ing_ps / raw_ps:.3f} (goal >= 0.95)"
    )
    return write(
        "ingest",
        {
            "passages": len(passages),
            "batch_size": BATCH,
            "raw_encode_per_s": round(raw_ps, 1),
            "ingest_per_s": round(ing_ps, 1),
            "ratio": round(ing_ps / raw_ps, 3),
        },
    )


if __name__ == "__main__":
    main()
