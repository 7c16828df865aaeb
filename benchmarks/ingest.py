"""Ingestion throughput into a store vs raw sentence-transformers encode of the same passages,
same batch size, same run (ratio; goal >= 0.95).

Both sides run back to back on each of PARTS slices, in alternating order; "raw" is the store's
own model's ``encode`` on the store's encoder thread, so the difference is what ingestion adds
(id checks, Chroma upserts and indexing).
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

from _common import RAW, alternating, write
from tqdm import tqdm

from parallelsearch.stores import ChromaStore, get_embedder, ingest, read_passages

N = 1000
BATCH = 32
PARTS = 8


def main() -> dict:
    passages = list(read_passages([RAW / "wiki_corpus/RUC-NLPIR_FlashRAG/sample_data.jsonl"]))[:N]
    emb = get_embedder()
    model = emb._model  # the same sentence-transformers model the store encodes with

    def raw_encode(texts: list[str]) -> None:
        emb.run(
            lambda: model.encode(texts, batch_size=BATCH, normalize_embeddings=True, show_progress_bar=False)
        )

    raw_encode([p.text for p in passages[:64]])  # warm-up
    store = ChromaStore("ingest-bench", path=Path(tempfile.mkdtemp()), embedder=emb)
    size = -(-len(passages) // PARTS)
    parts = [passages[i * size : (i + 1) * size] for i in range(PARTS)]

    def seconds(side: str, i: int) -> float:
        t0 = time.perf_counter()
        if side == "raw":
            raw_encode([p.text for p in parts[i]])
        else:
            ingest(store, passages=parts[i], batch_size=BATCH, progress=False)
        return time.perf_counter() - t0

    secs = alternating(("raw", "ingest"), tqdm(range(PARTS), desc="ingest benchmark"), seconds)
    raw_s, ingest_s = sum(secs["raw"]), sum(secs["ingest"])
    if store.count() != len(passages):  # every part added all its passages
        raise RuntimeError(f"the store holds {store.count()} passages, expected {len(passages)}")
    raw_ps, ing_ps = len(passages) / raw_s, len(passages) / ingest_s
    print(
        f"raw encode {raw_ps:.1f} passages/s, ingest {ing_ps:.1f} passages/s, ratio {ing_ps / raw_ps:.3f} (goal >= 0.95)"
    )
    return write(
        "ingest",
        {
            "passages": len(passages),
            "batch_size": BATCH,
            "parts": PARTS,
            "raw_encode_per_s": round(raw_ps, 1),
            "ingest_per_s": round(ing_ps, 1),
            "ratio": round(ing_ps / raw_ps, 3),
        },
    )


if __name__ == "__main__":
    main()
