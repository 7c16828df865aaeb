"""Credentials out of URLs: what every message, log line and status page shows of a URL
(``http://alice:***@host/v1``), and the split of a URL into where to go and how to log in, so
the password travels only in the request's ``Authorization`` header.
"""

from __future__ import annotations

import re
from urllib.parse import unquote, urlsplit, urlunsplit

#: ``scheme://user:password@`` anywhere in a text (the password: up to the last ``@`` before the host)
_CREDENTIALS = re.compile(r"(?P<head>\b[a-zA-Z][a-zA-Z0-9+.-]*://[^/\s:@]*):(?P<password>[^/\s]*)@")


def redact_url(url: str) -> str:
    """``url`` with its password shown as ``***``, for messages and logs."""
    return redact_urls(url)


def redact_urls(text: str) -> str:
    """``text`` with the password of every ``scheme://user:password@host`` URL in it masked."""
    return _CREDENTIALS.sub(lambda m: f"{m.group('head')}:***@", text)


def split_credentials(url: str) -> tuple[str, tuple[str, str] | None]:
    """``url`` without ``user:password@`` and the ``(user, password)`` it held (None without)."""
    parts = urlsplit(url)
    if parts.username is None and parts.password is None:
        return url, None
    host = parts.hostname or ""
    if ":" in host:  # an IPv6 address keeps its brackets
        host = f"[{host}]"
    netloc = host + (f":{parts.port}" if parts.port is not None else "")
    bare = urlunsplit(parts._replace(netloc=netloc))
    return bare, (unquote(parts.username or ""), unquote(parts.password or ""))
