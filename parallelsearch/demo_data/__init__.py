"""Real benchmark sample shipped with the package for the offline demo (see README.md here), and the
demo store made from it, which the demo, the `/ui` examples and the training smokes search."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

HOTPOTQA_SAMPLE = Path(__file__).with_name("hotpotqa_dev_sample.jsonl")
DEMO_STORE = "hotpotqa-demo"


def demo_store(limit: int | None = None, progress: bool = True) -> Any:
    """The demo store; indexing is idempotent, so only missing passages are ever encoded."""

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
    with writing_store(retrieval_config(), DEMO_STORE, on_wait=_to_stderr) as store:
        rep = ingest(store, [source], progress=progress)
    if rep.added:
        print(f"indexed {rep.added} passages into {store.name} ({store.location}) in {rep.seconds:.1f} s")
    return store


def _to_stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)
