"""Serve an ASGI app on 127.0.0.1 in a background thread: for notebooks, tests and benchmarks.

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
    def __init__(self, app: Any, port: int | None = None, start_timeout_s: float = 30.0, **options: Any):
        """``options``: ``uvicorn.Config``'s arguments over the served defaults (``ReadLimits``'s)."""
        import uvicorn

        from parallelsearch.stores.http.read_limits import ReadLimits

        options = {**ReadLimits().uvicorn_options(), **options}
        self.port = port or free_port()
        self.start_timeout_s = start_timeout_s
        self.server = uvicorn.Server(
            uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning", **options)
        )
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> LoopbackServer:
        self.thread.start()
        deadline = time.time() + self.start_timeout_s
        while not self.server.started:
            if time.time() > deadline or not self.thread.is_alive():
                raise UnavailableError(
                    f"the server on port {self.port} did not start within {self.start_timeout_s:g} s"
                )
            time.sleep(0.02)
        return self

    def __exit__(self, *exc: Any) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)
