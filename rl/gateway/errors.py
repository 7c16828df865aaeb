"""The gateway's one error: an HTTP status and a message naming what was wrong (a client's
mistake is a 4xx naming the field; the gateway's own trouble is a 5xx)."""

from __future__ import annotations

from typing import Any


class GatewayError(Exception):
    """A request the gateway cannot answer, with the status and the field (``param``) to blame."""

    def __init__(self, status: int, message: str, param: str | None = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param

    def body(self) -> dict[str, Any]:
        """OpenAI's error shape, so an OpenAI client raises with this message."""
        kind = "invalid_request_error" if self.status < 500 else "server_error"
        return {"error": {"message": self.message, "type": kind, "param": self.param, "code": None}}
