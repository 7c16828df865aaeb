"""One TLS context per process for every HTTP client this package makes.

Why: ``httpx.Client()`` and ``httpx.AsyncClient()`` build a new ``ssl.SSLContext`` (and
load the CA bundle) each time they are created, even for plain ``http://`` URLs. The
retriever client and the OpenAI-compatible policy make a client per request, so that cost
landed on every search and every policy turn; with a shared context a client is cheap
(docs/performance.md, "What made it faster (session 3)"). An ``SSLContext`` may be shared
across threads, event loops and forked children.
"""

from __future__ import annotations

import os
import ssl
import threading

_lock = threading.Lock()
_context: ssl.SSLContext | None = None


def tls_context() -> ssl.SSLContext:
    """The shared context: the CA bundle httpx uses by default (certifi), or ``SSL_CERT_FILE``."""
    global _context
    with _lock:
        if _context is None:
            cafile = os.environ.get("SSL_CERT_FILE")
            if not cafile:
                import certifi

                cafile = certifi.where()
            _context = ssl.create_default_context(cafile=cafile)
        return _context
