"""Serving a Server over a transport: `run`, `run_http` and the ASGI app factories.

This module sits above both the server and the transports and joins them: the
transports only know the port (`nimblemcp._port.Core`), the server knows no
transport. `Server.run()` and `Server.asgi_app()` delegate here.

- `asgi_app(server)`: the guarded app (Origin/Host checks, body and header limits,
  optional CORS and OAuth): what `run_http` serves and what to mount by default.
- `bare_asgi_app(server)`: the MCP endpoint alone, for a framework that brings its
  own guards.

Each entry point applies `ServerSettings.from_env()` first (`NIMBLEMCP_STATE_KEYS`,
`NIMBLEMCP_REDIS_URL`), filling in what the code did not give; this is the one place
the environment configures a server. Imports transports lazily (uvicorn, or nimblemcp's
own engine with `engine="nimblemcp"`, only when serving HTTP), so a stdio server never
pays for the HTTP stack.
"""

from __future__ import annotations

import contextlib
import signal
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, NoReturn

from nimblemcp.errors import StartupError
from nimblemcp.server._options import ServerSettings

if TYPE_CHECKING:
    import asyncio
    from collections.abc import Callable, Iterator

    from nimblemcp.server._server import Server
    from nimblemcp.transports.http.app import LegacyHandler, McpHttpApp
    from nimblemcp.transports.http.security import HttpSecurity, SecurityMiddleware

__all__ = ["HttpServeOptions", "TlsFiles", "asgi_app", "bare_asgi_app", "configure", "run", "run_http",
           "run_stdio"]

_ENGINES = ("uvicorn", "nimblemcp")  # `run_http(engine=...)`: the first is the default
_LOOPBACK = {"127.0.0.1", "localhost", "::1", "[::1]"}


def configure(server: Server, settings: ServerSettings | None = None) -> None:
    """Apply `settings` (default: the environment's) where `server` was given nothing."""
    (settings if settings is not None else ServerSettings.from_env()).apply(server)


def run(server: Server, transport: str = "stdio", **options: Any) -> None:
    """Serve until stdin closes (stdio) or the process is stopped (http), blocking."""
    if transport == "stdio":
        run_stdio(server, **options)
    elif transport == "http":
        run_http(server, **options)
    else:
        raise ValueError(f"unknown transport {transport!r} (use 'stdio' or 'http')")


def run_stdio(server: Server, *, shutdown_timeout: float | None = None) -> None:
    """Serve `server` on this process's stdin/stdout (blocking); when stdin ends or on
    SIGTERM, running requests get `shutdown_timeout` seconds (default 2)."""
    from nimblemcp.transports.stdio.server import run_stdio as serve

    configure(server)
    try:
        serve(server, shutdown_timeout=shutdown_timeout)
    except StartupError as exc:
        _startup_failed(exc)


def _startup_failed(exc: BaseException) -> NoReturn:
    """A lifespan that failed to start: one clear line on stderr, exit status 1."""
    import sys

    cause = exc.__cause__
    print(f"error: {exc}", file=sys.stderr)
    if cause is not None:
        import traceback

        traceback.print_exception(cause, file=sys.stderr)
    raise SystemExit(1)


def asgi_app(
    server: Server,
    path: str = "/mcp",
    *,
    security: HttpSecurity | None = None,
    auth: dict[str, Any] | None = None,
    health: bool = True,
    keepalive: float = 15.0,
    legacy_sessions: bool = True,
    legacy_sse: bool = False,
    freeze_gc: bool = False,
) -> SecurityMiddleware:
    """`server` as a guarded ASGI app. `security` holds the guards (`HttpSecurity`:
    allowed origins and hosts, body and header limits, CORS); `auth` makes the endpoint
    an OAuth resource server (the keyword arguments of
    `nimblemcp.transports.auth.bearer.BearerAuth`); `keepalive`: seconds between SSE
    keep-alive comments; `legacy_sessions=False` turns the 2025-11-25 session leg off,
    `legacy_sse=True` adds the 2024-11-05 HTTP+SSE endpoints (not with `auth`);
    `freeze_gc=True` tunes the process's GC for serving (what `run_http` does).

    Beside the endpoint it serves the server's `@server.route` routes and, unless
    `health=False`, `/healthz` (liveness) and `/readyz` (readiness: 503 until the
    lifespan has started). Mounted in a host (`Mount("/notes", app)`), every path is
    relative to the mount point: the endpoint answers on `/notes/mcp`. With `auth`,
    every path needs a token except the probes and `@server.route(..., public=True)`."""
    from nimblemcp.transports.http.security import secure_app

    configure(server)
    if legacy_sse and auth is not None:
        raise ValueError("legacy_sse cannot be combined with auth: the 2024-11-05 endpoints are not guarded")
    if auth is not None:
        auth = {**auth}
        auth.setdefault("scopes_for", server.scopes_needed)  # per-target scopes: 403 before running
        # Every path needs a token but the health probes and routes declared public.
        auth.setdefault("public_paths", _public_paths(server, health))
    routes = _routes(server, health)
    if legacy_sse:
        routes.update(_legacy_sse_routes(server, keepalive))
    return secure_app(server, path=path, security=security, keepalive=keepalive,
                      legacy=_shared_legacy(server, legacy_sessions, keepalive), legacy_sessions=legacy_sessions,
                      freeze_gc=freeze_gc, auth=auth, routes=routes)


def bare_asgi_app(server: Server, path: str = "/mcp", *, health: bool = True, **options: Any) -> McpHttpApp:
    """`server` as the bare MCP endpoint, without Origin/Host or size guards: only
    behind something that provides them (see `nimblemcp.transports.http.app.asgi_app`).
    Routes and health probes as for `asgi_app`."""
    from nimblemcp.transports.http.app import asgi_app as bare

    configure(server)
    if options.get("legacy") is None:
        options["legacy"] = _shared_legacy(server, options.get("legacy_sessions", True), options.get("keepalive", 15.0))
    return bare(server, path=path, routes=_routes(server, health), **options)


def _shared_legacy(server: Server, legacy_sessions: bool, keepalive: float) -> LegacyHandler | None:
    """With a shared (Redis) store, the 2025-11-25 leg keeps its resumable SSE streams
    there too, so a client reconnecting to another instance resumes (`http/_resume`);
    None: the endpoint's own in-process leg."""
    if not legacy_sessions:
        return None
    from nimblemcp.backends._select import shared_event_log

    shared = shared_event_log(server.store)
    if shared is None:
        return None
    from nimblemcp.transports.http._legacy_leg import LegacyHttp

    return LegacyHttp(server, keepalive=keepalive, shared_events=shared)


def _legacy_sse_routes(server: Server, keepalive: float) -> dict[str, Any]:
    """The 2024-11-05 HTTP+SSE endpoints (`/sse`, `/messages/`), one app for both paths."""
    from nimblemcp.transports.http.legacy_sse import HttpSseApp

    app = HttpSseApp(server, keepalive=keepalive)
    return {app.sse_path: app, app.messages_path: app, app.messages_path.rstrip("/"): app}


def _routes(server: Server, health: bool) -> dict[str, Any]:
    from nimblemcp.transports.http._routes import function_route, health_routes

    routes: dict[str, Any] = dict(health_routes(lambda: server.ready)) if health else {}
    for where, (fn, methods, _public) in server.routes.items():
        routes[where] = function_route(fn, methods)
    return routes


def _public_paths(server: Server, health: bool) -> list[str]:
    """The paths served without a token under `auth`: `@server.route(..., public=True)`
    and, unless `health=False`, the probes (a load balancer has no token)."""
    from nimblemcp.transports.http._routes import HEALTH_PATHS

    public = [where for where, (_fn, _methods, open_) in server.routes.items() if open_]
    return [*HEALTH_PATHS, *public] if health else public


@dataclass(frozen=True)
class TlsFiles:
    """HTTPS for `run_http` on either engine: `certfile` (PEM, the certificate chain),
    `keyfile` (its key, if not in the same file), `keyfile_password` (an encrypted key),
    `ca_certs` (PEM CA certificates: every client must then present a certificate signed
    by one of them). `TlsFiles("cert.pem", "key.pem")`."""

    certfile: str
    keyfile: str | None = None
    keyfile_password: str | None = None
    ca_certs: str | None = None

    def check(self) -> None:
        """Load the files once, so that one that cannot be used stops the start with
        one clear line (uvicorn would print a traceback)."""
        import ssl

        try:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(self.certfile, self.keyfile, self.keyfile_password)
            if self.ca_certs is not None:
                context.load_verify_locations(cafile=self.ca_certs)
        except (OSError, ssl.SSLError) as exc:
            import sys

            print(f"error: cannot serve HTTPS: {exc}", file=sys.stderr)
            raise SystemExit(1) from None

    def uvicorn_options(self) -> dict[str, Any]:
        import ssl

        return {"ssl_certfile": self.certfile, "ssl_keyfile": self.keyfile,
                "ssl_keyfile_password": self.keyfile_password, "ssl_ca_certs": self.ca_certs,
                "ssl_cert_reqs": ssl.CERT_REQUIRED if self.ca_certs is not None else ssl.CERT_NONE}


@dataclass(frozen=True)
class HttpServeOptions:
    """How `run_http` serves, beside where and on which engine: built once and handed
    unchanged to uvicorn's `Config` or to nimblemcp's engine.

    `keepalive`: seconds between SSE keep-alive comments. `shutdown_timeout`: seconds
    in-flight requests (and running tasks) get at a stop. `log_level`, `access_log`, and
    `log_config` (a logging dictConfig applied first, e.g. JSON lines). Behind a proxy:
    `root_path` is the prefix the proxy strips; `proxy_headers` with
    `forwarded_allow_ips` (the proxies trusted for X-Forwarded-For/Proto, default
    127.0.0.1) set the client address and scheme. `reuse_port` binds with SO_REUSEPORT
    so several processes share the port (`nimblemcp run --workers`). `tls`: HTTPS."""

    keepalive: float = 15.0
    shutdown_timeout: float = 10.0
    log_level: str = "info"
    access_log: bool = False
    log_config: dict[str, Any] | None = None
    root_path: str = ""
    proxy_headers: bool = True
    forwarded_allow_ips: str | None = None
    reuse_port: bool = False
    tls: TlsFiles | None = None


def run_http(
    server: Server,
    host: str = "127.0.0.1",
    port: int = 8000,
    path: str = "/mcp",
    *,
    engine: str = "uvicorn",
    options: HttpServeOptions | None = None,
    security: HttpSecurity | None = None,
    auth: dict[str, Any] | None = None,
    legacy_sessions: bool = True,
    legacy_sse: bool = False,
    on_started: Callable[[str, int], None] | None = None,
) -> None:
    """Serve `server` over HTTP/1.1, blocking: under uvicorn (`engine="uvicorn"`, the
    default) or on nimblemcp's own, faster engine (`engine="nimblemcp"`, opt-in:
    asyncio + httptools, uvloop when installed; see `transports/h1/engine_server.py`).
    `run_http(server, port=8000, options=HttpServeOptions(log_level="warning"))`.

    Bound to 127.0.0.1 unless told otherwise (HTTP-02). The guards are `security`
    (`HttpSecurity`: allowed origins and hosts, body and header limits, CORS); on a
    non-loopback bind with no `allowed_hosts`, any Host is accepted (Origin is still
    checked). `options` are the rest (`HttpServeOptions`: shutdown grace, logs, proxy
    headers, port sharing, TLS). `legacy_sessions=False` turns the 2025-11-25 session
    leg off; `auth` makes the endpoint an OAuth resource server (see
    `transports.auth.bearer.BearerAuth`). `legacy_sse=True` also serves the deprecated 2024-11-05
    HTTP+SSE transport (GET `/sse`, POST `/messages/`; per-process sessions, not with
    `auth`).

    The port is bound before anything starts: one that cannot be (in use, an address
    not this machine's, a privileged port) raises `CannotListen` and nothing ran. Once
    the lifespan has started and connections are served, `on_started(host, port)` is
    called with the address bound (the real port when `port=0`). A TLS file that cannot
    be used stops the start with a one-line error (exit status 1).
    """
    from nimblemcp._extras import needs_extra

    if engine not in _ENGINES:
        raise ValueError(f"unknown engine {engine!r} (use {' or '.join(_ENGINES)})")
    opts = options or HttpServeOptions()
    tls = opts.tls
    if tls is not None:
        tls.check()
    with needs_extra("http", "HTTP serving"):
        if engine == "uvicorn":
            import uvicorn
        else:
            import httptools  # noqa: F401

    if security is None:
        from nimblemcp.transports.http.security import HttpSecurity

        security = HttpSecurity()
    if security.allowed_hosts is None and host not in _LOOPBACK:
        security = replace(security, allowed_hosts=("*",))
    # The app's lifespan start collects and freezes what start-up built (`freeze_gc`).
    app = asgi_app(server, path=path, keepalive=opts.keepalive, freeze_gc=True,
                   legacy_sessions=legacy_sessions, security=security, auth=auth, legacy_sse=legacy_sse)
    shutdown_timeout = opts.shutdown_timeout
    from nimblemcp.transports.http._drain import ListenDrain

    if engine == "nimblemcp":
        from nimblemcp.transports.h1 import engine_server  # noqa: F401
    drain = ListenDrain(app)
    drain.on_drain(lambda: server.drain(shutdown_timeout))  # running tasks get the grace time
    drain.listens = lambda: server.move_listeners(min(server.config.listen.handover, shutdown_timeout))
    sockets = _listen(host, port, opts.reuse_port)
    if engine == "nimblemcp":
        _run_engine(server, drain, sockets, host=host, port=port, options=opts, on_started=on_started)
        return
    from nimblemcp.transports.http._uvicorn import uvicorn_limits

    config = uvicorn.Config(
        drain.entry, host=host, port=port, loop="auto", lifespan="on",
        log_level=opts.log_level, access_log=opts.access_log, server_header=False,
        timeout_graceful_shutdown=max(1, round(shutdown_timeout)),
        root_path=opts.root_path, proxy_headers=opts.proxy_headers,
        forwarded_allow_ips=opts.forwarded_allow_ips,
        log_config=uvicorn.config.LOGGING_CONFIG if opts.log_config is None else opts.log_config,
        **uvicorn_limits(app.security),  # head deadline and size, keep-alive (SECURITY.md)
        **(tls.uvicorn_options() if tls is not None else {}),
    )

    received: list[int] = []

    class _Uvicorn(uvicorn.Server):
        async def startup(self, sockets: Any = None) -> None:
            await super().startup(sockets)
            if not self.started:
                return
            import logging

            # uvicorn says where it runs only for an address it bound itself.
            bound_host, bound_port = _bound(sockets or [])
            shown = f"[{bound_host}]" if ":" in bound_host else bound_host
            logging.getLogger("uvicorn.error").info(
                "Uvicorn running on %s://%s:%d (Press CTRL+C to quit)",
                "https" if tls is not None else "http", shown, bound_port)
            if on_started is not None:
                on_started(bound_host, bound_port)

        def handle_exit(self, sig: int, frame: Any) -> None:
            received.append(sig)
            super().handle_exit(sig, frame)

        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            # uvicorn's own raises the caught signal again once it has shut down: the
            # process then dies of it (status 143, no atexit handler, backends not
            # closed). A graceful stop of `nimblemcp run` exits 0, on either engine.
            import threading

            if threading.current_thread() is not threading.main_thread():
                yield
                return
            before = {sig: signal.signal(sig, self.handle_exit) for sig in (signal.SIGINT, signal.SIGTERM)}
            try:
                yield
            finally:
                for sig, handler in before.items():
                    signal.signal(sig, handler)

        async def shutdown(self, sockets: Any = None) -> None:
            # Listen streams never finish by themselves: end them first, so the wait
            # below covers only real in-flight requests. SIGTERM (a rolling restart:
            # Kubernetes, docker, systemd) stops accepting, then moves them to another
            # instance (make-before-break, ended with the closing result once moved:
            # `Server.move_listeners`); any other stop sends the closing result (SUB-09):
            # the subscription is over.
            if received[:1] == [signal.SIGTERM]:
                for listener in self.servers:
                    listener.close()
                for sock in sockets or []:
                    sock.close()
                await drain.drain()
            else:
                drain.close()  # legacy GET and /sse streams end now
            server.close_listeners()
            await super().shutdown(sockets)

    served = _Uvicorn(config)
    try:
        with contextlib.suppress(KeyboardInterrupt):  # a SIGINT before uvicorn catches signals
            served.run(sockets=sockets)
    except SystemExit:
        if served.started:
            raise  # a failed lifespan is uvicorn's sys.exit(3): exit 1 below, as the engine does
    if not served.started:  # the lifespan failed (uvicorn logged why): exit non-zero
        import sys

        print(f"error: server {server.name!r} failed to start", file=sys.stderr)
        raise SystemExit(1)


def _run_engine(server: Server, drain: Any, sockets: list[Any], *, host: str, port: int,
                options: HttpServeOptions, on_started: Callable[[str, int], None] | None) -> None:
    """`run_http` on nimblemcp's own engine: the same limits, drain and exit status."""
    from nimblemcp.transports.h1.engine_server import EngineConfig, run
    from nimblemcp.transports.http._uvicorn import head_limit

    _configure_logging(options.log_level, options.log_config)
    security = drain.app.security
    tls = options.tls
    config = EngineConfig(
        host=host, port=port, sockets=tuple(sockets),
        root_path=options.root_path, proxy_headers=options.proxy_headers,
        forwarded_allow_ips=options.forwarded_allow_ips,
        head_timeout=security.head_timeout, max_head=head_limit(security),
        idle_timeout=security.idle_timeout, shutdown_timeout=options.shutdown_timeout,
        access_log=options.access_log,
        ssl_certfile=tls.certfile if tls else None, ssl_keyfile=tls.keyfile if tls else None,
        ssl_keyfile_password=tls.keyfile_password if tls else None,
        ssl_ca_certs=tls.ca_certs if tls else None,
    )

    async def before_stop(signum: int) -> None:
        # As under uvicorn (see `_Uvicorn.shutdown`): SIGTERM moves listen streams
        # elsewhere, any other stop ends them with the closing result (SUB-09).
        if signum == signal.SIGTERM:
            await drain.drain()
        else:
            drain.close()
        server.close_listeners()

    started = None if on_started is None else (lambda _address: on_started(*_bound(sockets)))
    if not run(drain.entry, config, before_stop, started, _loop_factory()):
        import sys

        print(f"error: server {server.name!r} failed to start", file=sys.stderr)
        raise SystemExit(1)


def _loop_factory() -> Callable[[], asyncio.AbstractEventLoop]:
    """uvloop's loop when it is installed (as uvicorn's `loop="auto"` picks), else asyncio's."""
    try:
        import uvloop
    except ImportError:
        import asyncio

        return asyncio.new_event_loop
    factory: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
    return factory


def _configure_logging(level: str, config: dict[str, Any] | None) -> None:
    import logging

    if config is not None:
        import logging.config

        logging.config.dictConfig(config)
        return
    log = logging.getLogger("nimblemcp.http")
    log.setLevel(level.upper())
    if not log.handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(levelname)s: %(message)s"))
        log.addHandler(handler)
        log.propagate = False


def _listen(host: str, port: int, reuse_port: bool) -> list[Any]:
    """Listening sockets for every address `host` names (as `loop.create_server` binds
    them: SO_REUSEADDR, IPv6 sockets IPv6-only), bound now so that a port in use is one
    clear error before anything starts. `reuse_port`: SO_REUSEPORT, so that several
    processes share the port and the kernel spreads connections over them (Linux, BSD)."""
    import socket

    from nimblemcp.errors import CannotListen

    sockets: list[socket.socket] = []
    try:
        infos = socket.getaddrinfo(host.strip("[]") or None, port, type=socket.SOCK_STREAM,
                                   flags=socket.AI_PASSIVE)
        for family, kind, proto, _name, address in dict.fromkeys(infos):
            sock = socket.socket(family, kind, proto)
            sockets.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if reuse_port:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            sock.bind(address)
            sock.listen(2048)
            sock.set_inheritable(True)
    except OSError as exc:
        for sock in sockets:
            sock.close()
        import errno

        why = {errno.EADDRINUSE: "the port is already in use (is another server running there?)",
               errno.EACCES: "permission denied (ports below 1024 need privileges)",
               errno.EADDRNOTAVAIL: "the address is not one of this machine's"}.get(
                   exc.errno or 0, exc.strerror or str(exc))
        raise CannotListen(f"cannot listen on {host}:{port}: {why}", host=host, port=port) from exc
    return sockets


def _bound(sockets: list[Any]) -> tuple[str, int]:
    """The host and port the first socket is bound to."""
    name = sockets[0].getsockname()
    return str(name[0]), int(name[1])
