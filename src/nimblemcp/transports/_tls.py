"""What the HTTP client passes to httpx as `verify`.

httpx builds a fresh SSL context, CA bundle included, for every AsyncClient: ~20 ms
each, and ~36 ms for the first in a process. A plain-HTTP endpoint never uses TLS
(the transport talks only to its own URL and follows no redirects), so it gets no
CA store at all; HTTPS endpoints share one verifying context per process, built the
way httpx builds its default (certifi, SSL_CERT_FILE / SSL_CERT_DIR honoured).
"""

from __future__ import annotations

import functools
import ssl

import httpx

__all__ = ["verify_for"]


@functools.cache
def _shared_context() -> ssl.SSLContext | bool:
    create = getattr(httpx, "create_ssl_context", None)  # public since httpx 0.28
    return create() if create is not None else True


def verify_for(url: str) -> ssl.SSLContext | bool:
    """Full verification for https URLs; nothing to verify for plain http."""
    return _shared_context() if not url.lower().startswith("http://") else False
