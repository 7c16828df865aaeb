"""One TLS context per process for every HTTP client this package makes: ``httpx`` builds a new
``SSLContext`` (loading the CA bundle) per client, even for ``http://``, and the retriever client
and policy make one per request (docs/performance.md, "What made it faster (session 3)").
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
