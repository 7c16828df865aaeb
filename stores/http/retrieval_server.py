"""A Search-R1-compatible ``/retrieve`` HTTP server over any batch searcher.

Protocol (Search-R1 ``search_r1/search/retrieval_server.py``): request ``{"queries": [...],
"topk": 3, "return_scores": true}``; response ``{"result": [[{"document": {"id", "contents"},
"score"}, ...], ...]}`` (without scores: ``[[{"id", "contents"}, ...], ...]``). Plus ``GET /health``,
which also names what the server searches (model, dimension, query prefix, corpus fingerprint).
With an API key every route but ``/health`` needs it, which Search-R1's own clients cannot send.
"""

from __future__ import annotations

import asyncio
from typing import Any, Protocol

from fastapi import FastAPI, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field

from parallelsearch.stores.http import request_batching
from parallelsearch.stores.http.api_key import ApiKeyGuard, KeyFailures, usable_key
from parallelsearch.stores.http.asgi_guard import BrowserGuard, JsonBodyGuard
from parallelsearch.stores.http.read_limits import ReadLimits
from parallelsearch.stores.http.request_batching import RequestBatcher
from parallelsearch.stores.passages import Passage

#: the largest ``topk`` a request may ask for (Chroma's default ``ef_search`` is 100)
MAX_TOPK = 50


class NamedBatchSearcher(request_batching.BatchSearcher, Protocol):
    """A batch searcher the server can report on: its store's name and size."""

    name: str

    def count(self) -> int: ...


class RetrieveRequest(BaseModel):
    queries: list[str] = Field(..., description="queries to search, in order")
    topk: int | None = Field(None, description="passages per query (server default when omitted)")
    return_scores: bool = Field(False, description="wrap each document with its score")


def passage_to_document(p: Passage) -> dict[str, Any]:
    return {"id": p.id, "contents": p.contents}


def searcher_identity(searcher: object) -> dict[str, Any]:
    """What a trainer checks before it trusts this server (``train --check``): the query encoder's
    model, dimension and query prefix, and the corpus's fingerprint; None where the searcher has none."""
    embedder = getattr(searcher, "embedder", None)
    fingerprint = getattr(searcher, "fingerprint", None)
    return {
        "model": getattr(embedder, "model_name", None),
        "dimension": getattr(embedder, "dimension", None) if embedder is not None else None,
        "query_prefix": getattr(embedder, "query_prefix", None),
        "fingerprint": fingerprint() if callable(fingerprint) else None,
    }


def default_concurrent_batches(searcher: object) -> int:
    """Batches a ``/retrieve`` server searches at once: one per encoder thread, plus one with ONNX,
    whose short encode leaves the threads idle during a batch's Chroma query (docs/performance.md,
    "What changed the server: ONNX by default")."""
    embedder = getattr(searcher, "embedder", None)
    extra = 1 if getattr(embedder, "backend", "torch") != "torch" else 0
    return getattr(embedder, "workers", 1) + extra


def create_retrieval_app(
    searcher: NamedBatchSearcher,
    *,
    default_topk: int = 3,
    max_queries: int = 256,
    max_query_chars: int = 2000,
    max_batch: int = 64,
    concurrent_batches: int | None = None,
    max_body_bytes: int = 4_000_000,
    api_key: str | None = None,
    key_failures: KeyFailures | None = None,
    allowed_hosts: frozenset[str] | None = None,
) -> FastAPI:
    """FastAPI app answering ``POST /retrieve`` and ``GET /health`` for ``searcher``.

    More than ``max_queries`` queries, a query over ``max_query_chars`` or a body over
    ``max_body_bytes`` is a 413. Concurrent requests are searched together, at most ``max_batch``
    queries per encoder call (0: each request on its own), ``concurrent_batches`` batches at once.
    Bodies are guarded by :class:`~.asgi_guard.JsonBodyGuard`; with ``api_key``, every route but
    ``/health`` answers 401 without it, before any body is read, and an address with repeated
    failures is held back (``key_failures``; default: 10 within a minute). Outermost, a POST
    must be ``application/json`` and, with ``allowed_hosts``, the ``Host`` one of them
    (:class:`~.asgi_guard.BrowserGuard`: no web page can drive the server).
    """
    app = FastAPI(title="parallelsearch /retrieve", version="1")
    _add_guards(app, max_body_bytes, api_key, key_failures, allowed_hosts)
    if concurrent_batches is None:
        concurrent_batches = default_concurrent_batches(searcher)
    batcher = (
        RequestBatcher(searcher, max_batch=max_batch, concurrent_batches=concurrent_batches)
        if max_batch
        else None
    )
    app.state.batcher = batcher
    app.add_exception_handler(RequestValidationError, _bad_request)
    _add_health_route(app, searcher, api_key_required=api_key is not None)
    _add_retrieve_route(app, searcher, batcher, default_topk, max_queries, max_query_chars)
    return app


def _add_guards(
    app: FastAPI,
    max_body_bytes: int,
    api_key: str | None,
    key_failures: KeyFailures | None,
    allowed_hosts: frozenset[str] | None,
) -> None:
    """The body guard, the key guard and, outermost, the browser guard, so a request is refused
    before its body is read or searched."""
    app.add_middleware(JsonBodyGuard, max_body_bytes=max_body_bytes, logger=__name__)
    if api_key is not None:
        if usable_key(api_key) is None:
            raise ValueError("the API key is empty; give a key or none")
        app.state.key_failures = key_failures if key_failures is not None else KeyFailures()
        # added last: outermost, before the body guard
        app.add_middleware(ApiKeyGuard, key=api_key, failures=app.state.key_failures)
    app.add_middleware(BrowserGuard, allowed_hosts=allowed_hosts)


async def _bad_request(_: Request, exc: RequestValidationError) -> JSONResponse:
    """A malformed body is a 422 naming the fields at fault, in one short shape."""
    errors = [{"loc": list(e.get("loc", ())), "msg": e.get("msg")} for e in exc.errors()]
    return JSONResponse(status_code=422, content={"detail": "invalid request body", "errors": errors})


def _add_health_route(app: FastAPI, searcher: NamedBatchSearcher, *, api_key_required: bool) -> None:
    """``GET /health``: the store and what searches it, for a client to check before trusting it."""

    @app.get("/health")
    async def health() -> dict[str, Any]:
        count = await asyncio.to_thread(searcher.count)
        return {
            "status": "ok",
            "store": getattr(searcher, "name", None),
            "passages": count,
            "api_key_required": api_key_required,
            **await asyncio.to_thread(searcher_identity, searcher),
        }


def _add_retrieve_route(
    app: FastAPI,
    searcher: NamedBatchSearcher,
    batcher: RequestBatcher | None,
    default_topk: int,
    max_queries: int,
    max_query_chars: int,
) -> None:
    """``POST /retrieve``: Search-R1's search call, batched with concurrent requests given a batcher."""

    @app.post("/retrieve")
    async def retrieve(req: RetrieveRequest) -> dict[str, Any]:
        k = _checked_topk(req, default_topk, max_queries, max_query_chars)
        if batcher is None:
            results = await asyncio.to_thread(searcher.search_batch, req.queries, k)
        else:
            results = await batcher.search(req.queries, k)
        return _retrieve_body(results, req.return_scores)


def _checked_topk(req: RetrieveRequest, default_topk: int, max_queries: int, max_query_chars: int) -> int:
    """The request's ``topk``; a request over the limits is refused with a 413, a malformed one with a 422."""
    if not req.queries:
        raise HTTPException(422, "queries must hold at least one query")
    if len(req.queries) > max_queries:
        raise HTTPException(413, f"too many queries: {len(req.queries)} > limit {max_queries}")
    for i, q in enumerate(req.queries):
        if len(q) > max_query_chars:
            raise HTTPException(413, f"query {i} is {len(q)} characters; limit is {max_query_chars}")
    k = req.topk if req.topk is not None else default_topk
    if not 1 <= k <= MAX_TOPK:
        raise HTTPException(422, f"topk must be between 1 and {MAX_TOPK}, got {k}")
    return k


def _retrieve_body(results: list[Any], return_scores: bool) -> dict[str, Any]:
    """Search-R1's response body for ``results``, plus the shards a partial answer went without."""
    if return_scores:
        body = {
            "result": [
                [{"document": passage_to_document(p), "score": p.score} for p in res] for res in results
            ]
        }
    else:
        body = {"result": [[passage_to_document(p) for p in res] for res in results]}
    # a sharded store that answered without some shards (allow_partial) says which
    missing = {label: err for res in results for label, err in getattr(res, "missing", {}).items()}
    if missing:
        body["missing_shards"] = missing
    return body


def run_server(
    app: FastAPI,
    host: str = "127.0.0.1",
    port: int = 8000,
    log_level: str = "info",
    *,
    ssl_certfile: str | None = None,
    ssl_keyfile: str | None = None,
    limits: ReadLimits | None = None,
) -> None:
    """Serve ``app`` with uvicorn (blocking); with a certificate and its key, over HTTPS. ``limits``:
    keep-alive, read deadlines, head size and trusted proxies (default :class:`ReadLimits`)."""
    import uvicorn

    uvicorn.run(
        app,
        host=host,
        port=port,
        log_level=log_level,
        ssl_certfile=ssl_certfile,
        ssl_keyfile=ssl_keyfile,
        **(limits or ReadLimits()).uvicorn_options(),
    )
