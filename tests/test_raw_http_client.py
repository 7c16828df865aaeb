"""The benchmarks' lean load-generator client (benchmarks/_raw_http.py) against a real server:
it reads what the ``/retrieve`` app sends, and refuses what it does not read with an error
naming it, so a load test never counts a misread answer as a success."""

from __future__ import annotations

import asyncio
import sys

import pytest
from conftest import ROOT
from fastapi import FastAPI
from fastapi.responses import StreamingResponse

from parallelsearch.stores import create_retrieval_app
from parallelsearch.stores.http.loopback import LoopbackServer
from parallelsearch.stores.passages import Passage

sys.path.insert(0, str(ROOT / "benchmarks"))
from _raw_http import RawHttpConnection, RawHttpError  # noqa: E402


class _Fixed:
    name = "fixed"

    def search_batch(self, queries, k=3):
        return [[Passage(id=f"{q}-{i}", title="T", text=q, score=0.5) for i in range(k)] for q in queries]

    def count(self) -> int:
        return 3


async def _posts(url: str, bodies: list[dict]) -> list[tuple[int, object]]:
    async with RawHttpConnection(url, timeout_s=10) as conn:  # one keep-alive connection for all
        return [await conn.post_json("/retrieve", b) for b in bodies]


def test_it_reads_retrieve_answers_on_one_keep_alive_connection():
    with LoopbackServer(create_retrieval_app(_Fixed())) as srv:
        got = asyncio.run(
            _posts(
                srv.url, [{"queries": ["a", "b"], "topk": 2, "return_scores": True}, {"queries": ["c"]}, {}]
            )
        )
    (s1, a1), (s2, a2), (s3, a3) = got
    assert s1 == 200 and [[d["document"]["id"] for d in r] for r in a1["result"]] == [
        ["a-0", "a-1"],
        ["b-0", "b-1"],
    ]
    assert s2 == 200 and [[d["id"] for d in r] for r in a2["result"]] == [["c-0", "c-1", "c-2"]]
    assert s3 == 422 and "queries" in str(a3)  # an error answer is read, not raised: the load test counts it


def test_a_chunked_answer_is_refused_by_name():
    app = FastAPI()

    @app.post("/retrieve")
    async def chunked():
        return StreamingResponse(iter([b'{"result": ', b"[]}"]), media_type="application/json")

    with LoopbackServer(app) as srv, pytest.raises(RawHttpError, match="transfer-encoding"):
        asyncio.run(_posts(srv.url, [{"queries": ["a"]}]))


def test_a_silent_server_times_out_and_a_bad_url_is_refused():
    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read(1 << 16)  # reads the request, never answers
        await asyncio.sleep(5)

    async def run() -> None:
        server = await asyncio.start_server(silent, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        async with server:
            async with RawHttpConnection(f"http://127.0.0.1:{port}", timeout_s=0.3) as conn:
                await conn.post_json("/retrieve", {"queries": ["a"]})

    with pytest.raises(asyncio.TimeoutError):
        asyncio.run(run())
    with pytest.raises(ValueError, match="http://host:port"):
        RawHttpConnection("https://127.0.0.1:1")


def test_a_body_cut_short_or_a_bad_length_is_refused_by_name():
    async def answer(head: bytes) -> None:
        async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await reader.read(1 << 16)
            writer.write(head)
            await writer.drain()
            writer.close()

        server = await asyncio.start_server(handler, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        async with server:
            async with RawHttpConnection(f"http://127.0.0.1:{port}", timeout_s=5) as conn:
                await conn.post_json("/retrieve", {"queries": ["a"]})

    with pytest.raises(RawHttpError, match="cut short at 10 of 100 bytes"):
        asyncio.run(answer(b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\n" + b"x" * 10))
    with pytest.raises(RawHttpError, match="bad header"):
        asyncio.run(answer(b"HTTP/1.1 200 OK\r\ncontent-length: ten\r\n\r\n"))
