"""Serve an ASGI app on 127.0.0.1 in a background thread: for notebooks, tests, benchmarks and the
training gateway.

``with LoopbackServer(app) as srv: ... srv.url`` starts uvicorn on a free port, waits until
it accepts connections (bounded), and stops it on exit.
"""

from __future__ import annotations

import socket
import threading
import time
from typing import Any

from parallelsearch.stores.errors import UnavailableError


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LoopbackServer:
    """uvicorn on a port of 127.0.0.1 in a daemon thread: ``with`` (or :meth:`start`/:meth:`stop`)
    starts it and waits until it accepts connections, within ``start_timeout_s``."""

    def __init__(
        self,
        app: Any,
        port: int | None = None,
        start_timeout_s: float = 30.0,
        thread_name: str | None = None,
        **options: Any,
    ):
        """``options``: ``uvicorn.Config``'s arguments over the served defaults (``ReadLimits``'s)."""
        import uvicorn

        from parallelsearch.stores.http.read_limits import ReadLimits

        options = {**ReadLimits().uvicorn_options(), **options}
        self.port = port or free_port()
        self.start_timeout_s = start_timeout_s
        self.server = uvicorn.Server(
            uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning", **options)
        )
        self.thread = threading.Thread(target=self.server.run, daemon=True, name=thread_name)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> LoopbackServer:
        self.thread.start()
        deadline = time.monotonic() + self.start_timeout_s
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise UnavailableError(
                    f"the server on port {self.port} did not start within {self.start_timeout_s:g} s"
                )
            time.sleep(0.02)
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)

    def __enter__(self) -> LoopbackServer:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()
