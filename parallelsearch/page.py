"""The question page of the LangServe app, ``GET /ui``: where LangServe's playground shows one JSON
dump, it shows each turn, the parallel sub-queries and their passages as they arrive. Plain HTML over
the route's ``/stream`` (the same guard as any client); ``GET /ui/examples`` offers annotated sample
questions, so the oracle policy shows the real flow on a fresh clone."""

from __future__ import annotations

from importlib.resources import files
from typing import Any

PAGE = "web/ask.html"
EXAMPLES_PER_SPLIT = 4


def example_questions(per_split: int = EXAMPLES_PER_SPLIT) -> list[dict[str, Any]]:
    """The first ``per_split`` parallelizable and sequential questions of the shipped sample,
    as graph inputs (question + metadata with golden answers and supporting titles)."""
    from parallelsearch.data import load_questions
    from parallelsearch.demo_data import HOTPOTQA_SAMPLE

    taken: dict[str, int] = {}
    out = []
    for q in load_questions(HOTPOTQA_SAMPLE):
        meta = {k: v for k, v in q.get("metadata", {}).items() if k != "source"}  # no local paths
        meta["golden_answers"] = q["golden_answers"]
        split = meta.get("split") or "other"
        if taken.get(split, 0) < per_split:
            taken[split] = taken.get(split, 0) + 1
            out.append({"question": q["question"], "metadata": meta})
    return out


def add_page(app: Any) -> None:
    """Serve the page at ``GET /ui`` (it learns the routes, threads and API key need from ``/health``)."""
    from fastapi.responses import HTMLResponse

    # read once, from the installed package: a missing file fails when the app is built, not per request
    html = files("parallelsearch").joinpath(PAGE).read_text(encoding="utf-8")
    examples = example_questions()

    @app.get("/ui", response_class=HTMLResponse, include_in_schema=False)
    async def ui() -> HTMLResponse:
        return HTMLResponse(html, headers={"Cache-Control": "no-cache"})

    @app.get("/ui/examples", include_in_schema=False)
    async def ui_examples() -> list[dict[str, Any]]:
        return examples
