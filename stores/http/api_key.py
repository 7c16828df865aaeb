"""The API key of the project's HTTP servers: one check, one refusal, for ``/retrieve`` and LangServe.

The key comes as ``X-API-Key: KEY`` or ``Authorization: Bearer KEY`` (for bearer-only clients),
in exactly one header, and is compared in constant time; nothing logs or echoes it: a 401 says
only missing or wrong. A blank key is no key, and an address that keeps failing is held back.
"""

from __future__ import annotations

import hmac
import ipaddress
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable
from typing import Any, Literal

from parallelsearch.stores.http.asgi_guard import json_reply

KeyProblem = Literal["missing", "wrong", "several"]
#: what a client must send; quoted in every 401
KEY_HEADERS = "X-API-Key: KEY or Authorization: Bearer KEY"
#: the status of each problem: several key headers are a malformed request, the others unauthorised
PROBLEM_STATUS = {"missing": 401, "wrong": 401, "several": 400}


def usable_key(key: str | None) -> str | None:
    """A configured key with surrounding whitespace removed; a blank one is no key (None)."""
    if key is None:
        return None
    return key.strip() or None


def sent_keys(headers: Iterable[tuple[bytes, bytes]]) -> list[bytes]:
    """Every key a request carries: each ``X-API-Key`` header and each ``Authorization: Bearer``."""
    sent: list[bytes] = []
    for name, value in headers:
        if name == b"x-api-key":
            sent.append(value.strip())
        elif name == b"authorization":
            scheme, _, token = value.strip().partition(b" ")
            if scheme.lower() == b"bearer":
                sent.append(token.strip())
    return sent


def key_problem(headers: Iterable[tuple[bytes, bytes]], key: str) -> KeyProblem | None:
    """Why a request with these (ASGI, lower-cased) headers may not pass: ``missing``, ``wrong``,
    ``several`` (more than one key header: one request would otherwise try many keys), or None."""
    expected = key.strip().encode("utf-8")
    if not expected:  # a blank key would let an empty header in
        raise ValueError("the API key is empty; give a key or none")
    sent = sent_keys(headers)
    if len(sent) > 1:
        return "several"
    if not sent or not sent[0]:
        return "missing"
    return None if hmac.compare_digest(sent[0], expected) else "wrong"


async def refuse(send: Any, problem: KeyProblem) -> None:
    """The 401 (400 for several keys) for ``problem``, as JSON (``{"detail": ...}``) with
    ``WWW-Authenticate: Bearer``."""
    detail = {
        "missing": f"missing API key: send {KEY_HEADERS}",
        "wrong": f"wrong API key (sent as {KEY_HEADERS})",
        "several": f"send exactly one API key header ({KEY_HEADERS}), not several",
    }[problem]
    await json_reply(
        send, PROBLEM_STATUS[problem], detail, headers={"WWW-Authenticate": "Bearer"}, problem=problem
    )


def client_prefix(client: str) -> str:
    """The network ``client`` is in: its /24 (IPv4) or /64 (IPv6); one host holds a whole /24 of
    loopback and a /64 of IPv6, so counting exact addresses multiplies the guesses."""
    try:
        address = ipaddress.ip_address(client)
    except ValueError:
        return client
    bits = 24 if address.version == 4 else 64
    return str(ipaddress.ip_network(f"{address}/{bits}", strict=False))


class FailureWindow:
    """Failure times per key (an address, a prefix, all) within ``window_s``; at most ``max_keys``
    keys are remembered, the least recently failed forgotten first."""

    def __init__(self, limit: int, window_s: float, max_keys: int, clock: Callable[[], float]):
        self.limit, self.window_s, self.max_keys, self.clock = limit, window_s, max_keys, clock
        self._times: OrderedDict[str, deque[float]] = OrderedDict()

    def _recent(self, key: str) -> deque[float] | None:
        times = self._times.get(key)
        if times is not None:
            horizon = self.clock() - self.window_s
            while times and times[0] <= horizon:
                times.popleft()
            if not times:
                del self._times[key]
                return None
        return times

    def retry_after_s(self, key: str) -> int | None:
        """Seconds before ``key``'s next try, or None when under the limit."""
        times = self._recent(key) if self.limit else None
        if times is None or len(times) < self.limit:
            return None
        return max(1, int(times[0] + self.window_s - self.clock() + 0.999))

    def add(self, key: str) -> None:
        if not self.limit:
            return
        times = self._recent(key)
        if times is None:
            times = self._times[key] = deque(maxlen=self.limit)
        times.append(self.clock())
        self._times.move_to_end(key)
        while len(self._times) > self.max_keys:
            self._times.popitem(last=False)


class KeyFailures:
    """Failed key checks, counted three ways: per client address (``limit``), per network (/24 of
    IPv4, /64 of IPv6: ``prefix_limit``, default ``limit``) and in total (``total_limit``, default
    10 x ``limit``), each within ``window_s`` seconds. Past any of them every request without the
    right key from that address, network or anyone is refused (429, ``Retry-After``) until the
    window passes: many addresses do not multiply the guesses. A request with the right key always
    passes. ``limit`` 0: off. At most ``max_clients`` addresses and networks are remembered."""

    def __init__(
        self,
        limit: int = 10,
        window_s: float = 60.0,
        *,
        prefix_limit: int | None = None,
        total_limit: int | None = None,
        max_clients: int = 10_000,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.limit, self.window_s = limit, window_s
        prefix_limit = limit if prefix_limit is None else prefix_limit
        total_limit = 10 * limit if total_limit is None else total_limit
        self._scopes = [
            (lambda c: c, FailureWindow(limit, window_s, max_clients, clock)),
            (client_prefix, FailureWindow(prefix_limit, window_s, max_clients, clock)),
            (lambda c: "all", FailureWindow(total_limit, window_s, 1, clock)),
        ]
        self.refused = 0

    @property
    def clock(self) -> Callable[[], float]:
        return self._scopes[0][1].clock

    @clock.setter
    def clock(self, clock: Callable[[], float]) -> None:
        for _, window in self._scopes:
            window.clock = clock

    def retry_after_s(self, client: str) -> int | None:
        """Seconds ``client`` must wait before its next try, or None when it may try now."""
        waits = [w for key, window in self._scopes if (w := window.retry_after_s(key(client))) is not None]
        return max(waits) if waits else None

    def failed(self, client: str) -> None:
        for key, window in self._scopes:
            window.add(key(client))


def client_address(scope: Any) -> str:
    """The address a request came from: the peer, or the ``X-Forwarded-For`` client only when the
    peer is a configured proxy (uvicorn's ``forwarded_allow_ips``; none by default)."""
    client = scope.get("client")
    return str(client[0]) if client else "unknown"


async def key_passes(scope: Any, send: Any, key: str, failures: KeyFailures) -> bool:
    """Check ``scope``'s key; when it does not pass, answer (401/400, or 429 while the client is
    held back after repeated failures) and return False. The right key always passes: only the
    failing path is held back, so a neighbour behind the same address (a NAT, a proxy, another
    process on the host) that keeps sending a wrong key cannot lock out a client that has it."""
    problem = key_problem(scope.get("headers") or [], key)
    if problem is None:
        return True
    client = client_address(scope)
    wait = failures.retry_after_s(client)
    if wait is not None:
        failures.refused += 1
        detail = f"too many failed API key attempts from {client}; retry in {wait} s"
        await json_reply(send, 429, detail, headers={"Retry-After": str(wait)}, problem="held_back")
        return False
    failures.failed(client)
    await refuse(send, problem)
    return False


class ApiKeyGuard:
    """ASGI middleware: every HTTP request but those to ``open_paths`` carries ``key`` or gets a 401
    (outside the body guard, so a client without the key never gets a body read); repeated
    failures from one address are held back (:class:`KeyFailures`)."""

    def __init__(
        self,
        app: Any,
        key: str,
        open_paths: frozenset[str] = frozenset({"/health"}),
        failures: KeyFailures | None = None,
    ):
        if usable_key(key) is None:
            raise ValueError("the API key is empty; give a key or none")
        self.app, self.key, self.open_paths = app, key, open_paths
        self.failures = failures if failures is not None else KeyFailures()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["path"] not in self.open_paths:
            if not await key_passes(scope, send, self.key, self.failures):
                return
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
