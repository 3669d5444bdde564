"""The TLS context an HTTP client connection uses, from the Client's `verify=` and `cert=`.

`verify` is True (the default store: certifi, or SSL_CERT_FILE / SSL_CERT_DIR, built
the way httpx builds its default), a CA bundle (a PEM file, or a directory of hashed
certificates), an `ssl.SSLContext` used as given, or False (no verification: tests and
trusted networks only). `cert` is the client certificate for servers that ask for one
(mutual TLS): a PEM file holding certificate and key, `(certfile, keyfile)` or
`(certfile, keyfile, password)`. Both wires get the same context.

httpx builds a fresh context, CA bundle included, for every AsyncClient: ~20 ms each,
and ~36 ms for the first in a process. A plain-HTTP endpoint never uses TLS (the
transport talks only to its own URL and follows no cross-origin redirects), so it gets
no context at all; HTTPS endpoints with the default settings share one per process.
"""

from __future__ import annotations

import functools
import os
import ssl
from typing import TypeAlias

from nimblemcp.errors import ClientError

__all__ = ["Cert", "Verify", "check", "tls_context"]

#: What `Client(verify=...)` takes.
Verify: TypeAlias = "bool | str | os.PathLike[str] | ssl.SSLContext"
#: What `Client(cert=...)` takes.
Cert: TypeAlias = "str | os.PathLike[str] | tuple[str, str] | tuple[str, str, str]"


def _default_context() -> ssl.SSLContext:
    import httpx

    create = getattr(httpx, "create_ssl_context", None)  # public since httpx 0.28
    return create() if create is not None else ssl.create_default_context()  # type: ignore[no-any-return]


_shared_context = functools.cache(_default_context)


def check(verify: Verify, cert: Cert | None) -> None:
    """TypeError for settings of the wrong shape (at construction, before any I/O)."""
    if not isinstance(verify, bool | str | os.PathLike | ssl.SSLContext):
        raise TypeError(f"verify= takes True, False, a CA bundle path or an SSLContext, not {verify!r}")
    if cert is not None and isinstance(verify, ssl.SSLContext):
        raise TypeError("give the client certificate in your SSLContext (load_cert_chain), not as cert=")
    if not (cert is None or isinstance(cert, str | os.PathLike)
            or (isinstance(cert, tuple) and len(cert) in (2, 3) and all(isinstance(c, str) for c in cert))):
        raise TypeError(f"cert= takes a PEM path, (certfile, keyfile) or (certfile, keyfile, password), "
                        f"not {cert!r}")


def tls_context(url: str, verify: Verify = True, cert: Cert | None = None) -> ssl.SSLContext | None:
    """The context for `url`'s connections; None for a plain-HTTP URL (no TLS)."""
    check(verify, cert)
    if url[:7].lower() == "http://":
        return None
    if isinstance(verify, ssl.SSLContext):
        return verify
    if verify is True and cert is None:
        return _shared_context()
    try:
        if verify is True:
            context = _default_context()
        elif verify is False:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        else:
            path = os.fspath(verify)
            directory = os.path.isdir(path)
            context = ssl.create_default_context(cafile=None if directory else path,
                                                 capath=path if directory else None)
        if cert is not None:
            context.load_cert_chain(*((os.fspath(cert),) if isinstance(cert, str | os.PathLike) else cert))
    except (OSError, ssl.SSLError) as exc:  # a missing file, a PEM that does not parse, a wrong password
        raise ClientError(f"cannot load the TLS settings (verify={verify!r}, cert={cert!r}): {exc}") from exc
    return context

