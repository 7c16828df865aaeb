"""One TLS context per process for every HTTP client this package makes: ``httpx`` builds a new
``SSLContext`` (loading the CA bundle) per client, even for ``http://``, and the retriever client
and policy make one per request (docs/performance.md, "What made the CPU query path faster").
"""

from __future__ import annotations

import os
import ssl
import threading

_lock = threading.Lock()
_contexts: dict[str | None, ssl.SSLContext] = {}


def tls_context(ca_bundle: str | os.PathLike[str] | None = None) -> ssl.SSLContext:
    """The shared context of ``ca_bundle`` (a PEM file of CA certificates a server's certificate
    must chain to); without one, the bundle httpx uses by default (certifi), or ``SSL_CERT_FILE``.
    Certificates and host names are always verified."""
    key = None if ca_bundle is None else str(ca_bundle)
    with _lock:
        if key not in _contexts:
            cafile = key or os.environ.get("SSL_CERT_FILE")
            if not cafile:
                import certifi

                cafile = certifi.where()
            try:
                _contexts[key] = ssl.create_default_context(cafile=cafile)
            except (OSError, ssl.SSLError) as e:
                raise ValueError(f"cannot read the CA bundle {cafile}: {e}") from e
        return _contexts[key]
