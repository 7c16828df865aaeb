"""Credentials out of URLs: what every message, log line and status page shows of a URL
(``http://alice:***@host/v1``), and the split of a URL into where to go and how to log in, so
the password travels only in the request's ``Authorization`` header.
"""

from __future__ import annotations

import re
from urllib.parse import unquote, urlsplit, urlunsplit

#: ``scheme://user:password@`` anywhere in a text (the password: up to the last ``@`` before the
#: next blank, so one with an unencoded ``/`` is masked whole)
_CREDENTIALS = re.compile(r"(?P<head>\b[a-zA-Z][a-zA-Z0-9+.-]*://[^/\s:@]*):(?P<password>[^\s@]*)@")
#: ``password=...`` of a libpq key=value DSN (``host=db password='s e'``) or a URL's query
#: (``?password=...``, ``&password=...``)
_KEY_VALUE = re.compile(
    r"(?P<head>\b(?:password|passwd|pwd|sslpassword)\s*=\s*)(?P<value>'(?:[^'\\]|\\.)*'|\"[^\"]*\"|[^\s&#]+)",
    re.IGNORECASE,
)


def redact_url(url: str) -> str:
    """``url`` with its password shown as ``***``, for messages and logs."""
    return redact_urls(url)


def redact_urls(text: str) -> str:
    """``text`` with every password masked: a ``scheme://user:password@host`` URL's, a
    ``?password=`` query's and a key=value DSN's (``password=...``)."""
    text = _CREDENTIALS.sub(lambda m: f"{m.group('head')}:***@", text)
    return _KEY_VALUE.sub(lambda m: f"{m.group('head')}***", text)


def check_credentials(url: str) -> None:
    """A clear error for a URL whose password was not percent-encoded: an ``/``, ``?`` or ``#`` in
    it ends the host part early (``http://user:pa/ss@host``), which HTTP clients report as an
    invalid URL or port, or send to the wrong host."""
    parts = urlsplit(url)
    rest = url.partition("://")[2][len(parts.netloc) :]
    port = parts.netloc.rpartition(":")[2] if ":" in parts.netloc else "0"
    if "@" not in parts.netloc and not port.isdigit() and re.match(r"[/?#][^/?#\s]*@", rest):
        raise ValueError(
            f"the URL {redact_url(url)} has a '/', '?' or '#' in its user or password: "
            "percent-encode them (%2F, %3F, %23), e.g. with urllib.parse.quote(password, safe='')"
        )


def split_credentials(url: str) -> tuple[str, tuple[str, str] | None]:
    """``url`` without ``user:password@`` and the ``(user, password)`` it held (None without)."""
    check_credentials(url)
    parts = urlsplit(url)
    if parts.username is None and parts.password is None:
        return url, None
    host = parts.hostname or ""
    if ":" in host:  # an IPv6 address keeps its brackets
        host = f"[{host}]"
    netloc = host + (f":{parts.port}" if parts.port is not None else "")
    bare = urlunsplit(parts._replace(netloc=netloc))
    return bare, (unquote(parts.username or ""), unquote(parts.password or ""))
