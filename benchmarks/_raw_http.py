"""A lean HTTP/1.1 keep-alive client for load tests: a few bytes written, one body read.

On the benchmark machine the clients share the cores with the server they measure, and httpx's
``AsyncClient`` costs several times this client's CPU per request (docs/performance.md). Like
``wrk`` or ``hey``, it writes the request on one connection per client and reads the body by its
``Content-Length``; anything else is an error naming what came back, and every I/O has a timeout.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any
from urllib.parse import urlsplit


class RawHttpError(RuntimeError):
    """The server answered something this client does not read (or nothing in time)."""


class RawHttpConnection:
    """One keep-alive connection; ``post_json`` sends a request and returns (status, parsed body)."""

    def __init__(self, url: str, timeout_s: float = 60.0) -> None:
        parts = urlsplit(url)
        if parts.scheme != "http" or not parts.hostname or not parts.port:
            raise ValueError(f"raw HTTP client needs http://host:port, got {url!r}")
        self.host, self.port, self.timeout_s = parts.hostname, parts.port, timeout_s
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None

    async def __aenter__(self) -> RawHttpConnection:
        self._reader, self._writer = await asyncio.wait_for(
            asyncio.open_connection(self.host, self.port), self.timeout_s
        )
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._writer is not None:
            self._writer.close()
            try:
                await asyncio.wait_for(self._writer.wait_closed(), self.timeout_s)
            except (OSError, asyncio.TimeoutError):
                pass

    async def post_json(self, path: str, body: Any) -> tuple[int, Any]:
        return await asyncio.wait_for(self._post(path, json.dumps(body).encode()), self.timeout_s)

    async def _post(self, path: str, payload: bytes) -> tuple[int, Any]:
        assert self._reader is not None and self._writer is not None, "use it as an async context manager"

        def error(what: str) -> RawHttpError:
            return RawHttpError(f"{self.host}:{self.port}{path}: {what}")

        head = (
            f"POST {path} HTTP/1.1\r\nhost: {self.host}:{self.port}\r\ncontent-type: application/json\r\n"
            f"content-length: {len(payload)}\r\n\r\n"
        ).encode()
        self._writer.write(head + payload)
        await self._writer.drain()
        try:
            header = await self._reader.readuntil(b"\r\n\r\n")
        except asyncio.IncompleteReadError as e:
            raise error(f"closed the connection ({e.partial[:200]!r})") from e
        lines = header.decode("latin-1").split("\r\n")
        try:
            status = int(lines[0].split(" ", 2)[1])
        except (IndexError, ValueError) as e:
            raise error(f"not an HTTP status line: {lines[0]!r}") from e
        length = None
        for line in lines[1:]:
            name, _, value = line.partition(":")
            if name.strip().lower() == "content-length":
                try:
                    length = int(value)
                except ValueError as e:
                    raise error(f"bad header {line!r}") from e
            elif name.strip().lower() == "transfer-encoding":
                raise error(f"{line!r} is not read by this client")
        if length is None:
            raise error(f"response {status} has no content-length")
        try:
            data = await self._reader.readexactly(length)
        except asyncio.IncompleteReadError as e:
            raise error(f"body cut short at {len(e.partial)} of {length} bytes") from e
        try:
            return status, json.loads(data)
        except ValueError as e:
            raise error(f"status {status}, body not JSON: {data[:200]!r}") from e
