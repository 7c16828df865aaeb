"""How long a client may take to send a request, how large its head may be, and whom to believe
about its address: the uvicorn options both servers run with (docs/scaling.md, "Serving").

uvicorn alone times out only an idle kept-alive connection: a client that opens a connection and
sends nothing, or a header byte at a time (slowloris), or a body at 10 B/s, holds its connection
(and its request's memory) forever, and ``X-Forwarded-For`` is believed from loopback by default,
so any local process could pick the address a failed key is counted against. Here every request
has a head deadline (from the connection's opening, or from the first read of a head that did
not arrive whole; between requests uvicorn's keep-alive timeout holds) and a body deadline (from
the first read of a body that did not arrive whole), a head over ``max_head_bytes`` is a 431,
and forwarded headers are read only from the proxies an operator names. A response the client
does not read is the same hold the other way: once the connection's send buffer is full, the
client has ``send_timeout_s`` to take some of it (as nginx's ``send_timeout``), or the connection
is aborted, its buffered response freed and one line logged.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import struct
from dataclasses import dataclass
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

log = logging.getLogger("parallelsearch.http")


@dataclass(frozen=True)
class ReadLimits:
    """The read, write and header limits of one server (settings ``server_*``; see the module doc)."""

    keep_alive_s: float = 30.0
    head_timeout_s: float = 20.0
    body_timeout_s: float = 60.0
    send_timeout_s: float = 30.0
    max_head_bytes: int = 64 * 1024
    forwarded_allow_ips: tuple[str, ...] = ()

    def uvicorn_options(self) -> dict[str, Any]:
        """Keyword arguments for ``uvicorn.run`` / ``uvicorn.Config`` that enforce these limits:
        the guarded protocol, the keep-alive timeout and the forwarded-header policy, each set
        explicitly (uvicorn's own default trusts ``X-Forwarded-For`` from 127.0.0.1)."""
        return {
            "http": guarded_protocol(self),
            "timeout_keep_alive": self.keep_alive_s,
            "h11_max_incomplete_event_size": self.max_head_bytes,
            "proxy_headers": bool(self.forwarded_allow_ips),
            "forwarded_allow_ips": ",".join(self.forwarded_allow_ips) or None,
        }


def _status(code: int, reason: str, detail: str) -> bytes:
    """A complete HTTP/1.1 response that closes the connection (written before any app answered)."""
    body = ('{"detail": "' + detail + '"}').encode()
    head = (
        f"HTTP/1.1 {code} {reason}\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\nconnection: close\r\n\r\n"
    )
    return head.encode("latin-1") + body


class GuardedHttpTools(HttpToolsProtocol):
    """uvicorn's httptools protocol with a head deadline, a body deadline and a head size limit
    (the class attribute ``limits``; :func:`guarded_protocol` makes one per server). A deadline is
    armed only while a head or body is incomplete after a read, so a request that arrives in one
    piece (nearly all) costs no timer."""

    limits = ReadLimits()

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        self._deadline: asyncio.TimerHandle | None = None
        self._send_deadline: asyncio.TimerHandle | None = None
        self._in_head, self._in_body, self._too_large = True, False, False
        self._head_bytes = 0
        super().connection_made(transport)
        self._arm(self.limits.head_timeout_s, "request head")  # a connection that sends nothing

    def _arm(self, seconds: float, what: str) -> None:
        self._deadline = self.loop.call_later(seconds, self._expired, what, seconds)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _expired(self, what: str, seconds: float) -> None:
        """Close a connection whose request did not arrive in time (a 408 when nothing was answered)."""
        self._deadline = None
        if self.transport.is_closing():
            return
        if self.cycle is None or not self.cycle.response_started:
            self.transport.write(
                _status(408, "Request Timeout", f"the {what} did not arrive within {seconds:g} s")
            )
        self.transport.close()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self._too_large:
            return
        if self._in_head:  # a head still incomplete: every byte of it so far counts
            self._head_bytes += len(data)
            if self._head_bytes > self.limits.max_head_bytes:
                self._refuse_head()
            elif self._deadline is None:
                self._arm(self.limits.head_timeout_s, "request head")
        elif self._in_body and self._deadline is None:
            self._arm(self.limits.body_timeout_s, "request body")

    def _refuse_head(self) -> None:
        """A 431 for a head over ``max_head_bytes``; the connection is closed and nothing runs."""
        self._too_large, self._in_head = True, False
        self._disarm()
        if not self.transport.is_closing():
            limit = self.limits.max_head_bytes
            self.transport.write(
                _status(431, "Request Header Fields Too Large", f"the request head exceeds {limit} bytes")
            )
            self.transport.close()

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._in_head, self._head_bytes = True, 0

    def on_headers_complete(self) -> None:
        size = len(self.url) + sum(len(name) + len(value) + 4 for name, value in self.headers)
        if size > self.limits.max_head_bytes:  # a whole head that arrived at once
            return self._refuse_head()
        self._in_head, self._in_body = False, True
        self._disarm()
        super().on_headers_complete()

    def on_body(self, body: bytes) -> None:
        if not self._too_large:
            super().on_body(body)

    def on_message_complete(self) -> None:
        if self._too_large:
            return
        self._in_body = False
        self._disarm()
        super().on_message_complete()

    def pause_writing(self) -> None:
        """The send buffer is full: the client has ``send_timeout_s`` to read some of it."""
        super().pause_writing()
        if self._send_deadline is None:
            self._send_deadline = self.loop.call_later(self.limits.send_timeout_s, self._send_expired)

    def resume_writing(self) -> None:
        self._disarm_send()
        super().resume_writing()

    def _disarm_send(self) -> None:
        if self._send_deadline is not None:
            self._send_deadline.cancel()
            self._send_deadline = None

    def _send_expired(self) -> None:
        """Abort a connection whose client stopped reading: ``abort`` drops the buffered response
        (``close`` would keep it until it drained), a zero linger resets the connection so the
        kernel's send buffer goes too, and the app's pending send returns."""
        self._send_deadline = None
        if self.transport.is_closing():
            return
        peer = (self.client or ("?",))[0]
        size = self.transport.get_write_buffer_size()
        log.warning(
            "closed the connection from %s: its response did not drain within %g s "
            "(server_send_timeout_s; %d bytes unsent)",
            peer,
            self.limits.send_timeout_s,
            size,
        )
        sock = self.transport.get_extra_info("socket")
        if sock is not None:  # a reset, so the kernel drops its send buffer too (no lingering FIN)
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.transport.abort()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        self._disarm_send()
        super().connection_lost(exc)


def guarded_protocol(limits: ReadLimits) -> type[GuardedHttpTools]:
    """The protocol class uvicorn instantiates per connection, bound to ``limits``."""
    return type("GuardedHttpTools", (GuardedHttpTools,), {"limits": limits})
