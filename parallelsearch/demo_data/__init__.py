"""Real benchmark sample shipped with the package for the offline demo (see README.md here), and the
demo store made from it, which the demo, the `/ui` examples and the training smokes search."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

HOTPOTQA_SAMPLE = Path(__file__).with_name("hotpotqa_dev_sample.jsonl")
DEMO_STORE = "hotpotqa-demo"
#: the demo store's HNSW ``ef_search``: above the sample's passage count (about 2,000), so its search
#: walks the whole graph and answers as a brute-force search does. Chroma builds the graph with
#: parallel inserts and re-inserts the records since its last save at every open, so an approximate
#: search of the same store can rank differently from one process, or one build, to the next
#: (docs/performance.md, "Exact search on the demo store"); a run that must reproduce cannot have that.
DEMO_EF_SEARCH = 4096


def demo_store(limit: int | None = None, progress: bool = True) -> Any:
    """The demo store, searched exhaustively (:data:`DEMO_EF_SEARCH`); indexing is idempotent, so only
    missing passages are ever encoded. A store made by an older version gets the exhaustive search
    from the next process that opens it."""

    from parallelsearch.graphs.factory import writing_store
    from parallelsearch.registry import retrieval_config
    from parallelsearch.settings import get_settings
    from parallelsearch.stores.ingestion.pipeline import ingest

    source = HOTPOTQA_SAMPLE
    if limit:
        lines = HOTPOTQA_SAMPLE.read_text(encoding="utf-8").splitlines()[:limit]
        source = get_settings().home / "demo-cache" / f"hotpotqa_sample_{limit}.jsonl"
        source.parent.mkdir(parents=True, exist_ok=True)
        source.write_text("\n".join(lines) + "\n", encoding="utf-8")
    hnsw = {"ef_search": DEMO_EF_SEARCH}
    with writing_store(retrieval_config(), DEMO_STORE, on_wait=_to_stderr, hnsw=hnsw) as store:
        rep = ingest(store, [source], progress=progress)
    if rep.added:
        print(f"indexed {rep.added} passages into {store.name} ({store.location}) in {rep.seconds:.1f} s")
    return store


def _to_stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)
