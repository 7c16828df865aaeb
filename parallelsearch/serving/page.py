"""The question page of the LangServe app, ``GET /ui``: where LangServe's playground shows one JSON
dump, it shows each turn, the parallel sub-queries and their passages as they arrive. Plain HTML over
the route's ``/stream`` (the same guard as any client); ``GET /ui/examples`` offers annotated sample
questions, so the oracle policy shows the real flow on a fresh clone."""

from __future__ import annotations

import base64
import hashlib
import re
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


def content_security_policy(html: str) -> str:
    """The page's policy: its own inline script and style (by hash) and requests to this server,
    nothing else: no other script, frame, form target or base URL, and no page may frame it."""

    def hashes(tag: str) -> str:
        bodies = re.findall(rf"<{tag}>(.*?)</{tag}>", html, flags=re.DOTALL)
        digests = (base64.b64encode(hashlib.sha256(b.encode("utf-8")).digest()).decode() for b in bodies)
        return " ".join(f"'sha256-{d}'" for d in digests) or "'none'"

    return (
        f"default-src 'none'; script-src {hashes('script')}; style-src {hashes('style')}; "
        "connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; "
        "frame-ancestors 'none'"
    )


def security_headers(html: str) -> dict[str, str]:
    """What ``/ui`` is sent with: the policy, no MIME sniffing, no framing, no referrer."""
    return {
        "Content-Security-Policy": content_security_policy(html),
        "X-Content-Type-Options": "nosniff",
        "X-Frame-Options": "DENY",
        "Referrer-Policy": "no-referrer",
        "Cache-Control": "no-cache",
    }


def add_page(app: Any) -> None:
    """Serve the page at ``GET /ui`` (it learns the routes, threads and API key need from ``/health``)."""
    from fastapi.responses import HTMLResponse, JSONResponse

    # read once, from the installed package: a missing file fails when the app is built, not per request
    html = files("parallelsearch.serving").joinpath(PAGE).read_text(encoding="utf-8")
    examples = example_questions()
    headers = security_headers(html)

    @app.get("/ui", response_class=HTMLResponse, include_in_schema=False)
    async def ui() -> HTMLResponse:
        return HTMLResponse(html, headers=headers)

    @app.get("/ui/examples", include_in_schema=False)
    async def ui_examples() -> JSONResponse:
        return JSONResponse(examples, headers={"X-Content-Type-Options": "nosniff"})
