"""The API key of the project's HTTP servers: one check, one refusal, for ``/retrieve`` and LangServe.

The key comes as ``X-API-Key: KEY`` or ``Authorization: Bearer KEY`` (for bearer-only clients)
and is compared in constant time; nothing logs or echoes it: a 401 says only missing or wrong.
"""

from __future__ import annotations

import hmac
import ipaddress
from collections.abc import Iterable
from typing import Any, Literal

from parallelsearch.stores.http.asgi_guard import json_reply

KeyProblem = Literal["missing", "wrong"]
#: what a client must send; quoted in every 401
KEY_HEADERS = "X-API-Key: KEY or Authorization: Bearer KEY"


def key_problem(headers: Iterable[tuple[bytes, bytes]], key: str) -> KeyProblem | None:
    """Why a request with these (ASGI, lower-cased) headers may not pass: ``missing``, ``wrong``, or None."""
    expected = key.strip().encode("utf-8")
    sent: list[bytes] = []
    for name, value in headers:
        if name == b"x-api-key":
            sent.append(value.strip())
        elif name == b"authorization":
            scheme, _, token = value.strip().partition(b" ")
            if scheme.lower() == b"bearer":
                sent.append(token.strip())
    if not sent:
        return "missing"
    # every candidate is compared (no early exit), each in constant time
    ok = False
    for token in sent:
        ok |= hmac.compare_digest(token, expected)
    return None if ok else "wrong"


async def refuse(send: Any, problem: KeyProblem) -> None:
    """The 401 for ``problem``, as JSON (``{"detail": ...}``) with ``WWW-Authenticate: Bearer``."""
    detail = (
        f"missing API key: send {KEY_HEADERS}"
        if problem == "missing"
        else f"wrong API key (sent as {KEY_HEADERS})"
    )
    await json_reply(send, 401, detail, headers={"WWW-Authenticate": "Bearer"}, problem=problem)


class ApiKeyGuard:
    """ASGI middleware: every HTTP request but those to ``open_paths`` carries ``key`` or gets a 401
    (outside the body guard, so a client without the key never gets a body read)."""

    def __init__(self, app: Any, key: str, open_paths: frozenset[str] = frozenset({"/health"})):
        self.app, self.key, self.open_paths = app, key, open_paths

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["path"] not in self.open_paths:
            problem = key_problem(scope.get("headers") or [], self.key)
            if problem:
                return await refuse(send, problem)
        await self.app(scope, receive, send)


def is_loopback(host: str) -> bool:
    """Whether binding ``host`` keeps a server on this machine (127.0.0.0/8, ::1, localhost)."""
    if host.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip().strip("[]")).is_loopback
    except ValueError:
        return False  # a name other than localhost, or "" (every interface): it may be reachable


def bind_problem(
    host: str, has_key: bool, *, insecure_no_key: bool, how_to_set: str
) -> tuple[str, str] | None:
    """``("refuse" | "warn", one line)`` when serving on ``host`` would open the server to the network
    without a key (``warn`` with ``insecure_no_key``); ``how_to_set`` names the flag and setting."""
    if has_key or is_loopback(host):
        return None
    if insecure_no_key:
        return (
            "warn",
            f"warning: serving on {host} without an API key: anyone who can reach the port can use it",
        )
    return (
        "refuse",
        f"refusing to serve on {host} without an API key: set {how_to_set}, bind 127.0.0.1, "
        "or pass --insecure-no-key to serve it open",
    )
