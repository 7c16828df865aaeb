"""The question page of the LangServe app: ``GET /ui``.

LangServe's playground renders a graph's output as one raw JSON dump; this page shows
what ParallelSearch does, as it happens: the question, each planner turn, the parallel
sub-queries with their passages as each searcher finishes, and the answer. It is plain
HTML and JavaScript (``parallelsearch/web/ask.html``, shipped as package data) over the
route's LangServe ``/stream`` endpoint, so it goes through the same guard, limits and
API key as any client. With threads on (:mod:`parallelsearch.threads`) it sends a
``thread_id`` and lists the thread's earlier questions.
"""

from __future__ import annotations

from importlib.resources import files
from typing import Any

PAGE = "web/ask.html"


def page_html() -> str:
    """The page's HTML, read from the installed package."""
    return files("parallelsearch").joinpath(PAGE).read_text(encoding="utf-8")


def add_page(app: Any) -> None:
    """Serve the page at ``GET /ui`` (it learns the routes, threads and API key need from ``/health``)."""
    from fastapi.responses import HTMLResponse

    html = page_html()  # read once: a missing file fails when the app is built, not per request

    @app.get("/ui", response_class=HTMLResponse, include_in_schema=False)
    async def ui() -> HTMLResponse:
        return HTMLResponse(html, headers={"Cache-Control": "no-cache"})
