"""`nimblemcp run`: serve a Server over stdio or HTTP, configured for production.

One `RunSettings` is built from, lowest first: the defaults, a TOML config file
(`--config FILE` or `NIMBLEMCP_CONFIG`; top-level keys or a `[run]` table, named like
the long options), the environment (`NIMBLEMCP_<OPTION>`, e.g. `NIMBLEMCP_ALLOWED_HOSTS`;
the state keys and Redis URL through `ServerSettings.from_env()`), then the flags. An
HTTP server prints its endpoint on stderr once it listens, and with `-v` these settings
after it, secrets masked. A port that cannot be bound is one line naming it and the
flag that changes it, exit status 1, before the server's lifespan runs.

`--workers N` (N > 1) starts N copies of this command that share the port through
SO_REUSEPORT and supervises them (SIGTERM/SIGINT are passed on, a crashed worker is
restarted). Workers are separate processes, so they need the same state keys and one
Redis: the command refuses to start without them.

Kept light: it runs on the cold-start path of every stdio server (`tomllib`, `json`,
`subprocess` only when needed). Public so that programs can build the same
`RunSettings`; imports the server and `serving`, never the client.
"""

from __future__ import annotations

import os
import sys
from dataclasses import asdict, dataclass, fields, replace
from typing import TYPE_CHECKING, Any, NoReturn

from nimblemcp.server._options import ServerSettings

if TYPE_CHECKING:
    import argparse
    from collections.abc import Callable
    from pathlib import Path

    from nimblemcp.server._server import Server

__all__ = ["RunSettings", "add_arguments", "main"]

ENV_PREFIX = "NIMBLEMCP_"
_WORKER_ENV = "NIMBLEMCP_WORKER_ID"  # set by the supervisor in each worker it starts


@dataclass(frozen=True, slots=True)
class RunSettings:
    """Everything `nimblemcp run` serves with (see the module docstring for sources)."""

    transport: str = "stdio"
    host: str = "127.0.0.1"
    port: int = 8000
    path: str = "/mcp"
    allowed_hosts: tuple[str, ...] | None = None
    allowed_origins: tuple[str, ...] = ()
    root_path: str = ""
    proxy_headers: bool = True
    forwarded_allow_ips: str = "127.0.0.1,::1"
    workers: int = 1
    log_format: str = "text"
    log_level: str = "info"
    shutdown_timeout: float = 10.0
    max_body: int | None = None
    state_keys_file: str | None = None
    state_keys: tuple[str, ...] | None = None
    redis_url: str | None = None
    legacy_sse: bool = False
    engine: str = "uvicorn"
    ssl_certfile: str | None = None
    ssl_keyfile: str | None = None
    ssl_keyfile_password: str | None = None
    ssl_ca_certs: str | None = None
    openapi: str | None = None
    base_url: str | None = None
    forward_headers: tuple[str, ...] = ()

    # -- sources -----------------------------------------------------------------------

    @classmethod
    def from_config_file(cls, path: str | Path) -> dict[str, Any]:
        """The options a TOML file sets (top level or its `[run]` table)."""
        import tomllib
        from pathlib import Path

        try:
            data = tomllib.loads(Path(path).read_text())
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise SystemExit(f"nimblemcp: cannot read config file {path}: {exc}") from None
        table = data.get("run", data)
        if not isinstance(table, dict):
            raise SystemExit(f"nimblemcp: {path}: [run] must be a table")
        return {_field(key, f"{path}"): value for key, value in table.items()}

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None) -> dict[str, Any]:
        """The options the environment sets: `NIMBLEMCP_<OPTION>` for the HTTP ones;
        state keys and Redis URL as `ServerSettings.from_env()` reads them."""
        env = dict(os.environ if environ is None else environ)
        given: dict[str, Any] = {}
        for f in fields(cls):
            if f.name in ("state_keys", "redis_url"):
                continue
            value = env.get(ENV_PREFIX + f.name.upper(), "").strip()
            if value:
                given[f.name] = value
        server = ServerSettings.from_env(env)
        if server.state_keys:
            given["state_keys"] = server.state_keys
        if server.redis_url:
            given["redis_url"] = server.redis_url
        return given

    @classmethod
    def build(cls, *layers: dict[str, Any]) -> RunSettings:
        """Defaults, then each layer in turn (later wins), values checked and typed."""
        merged: dict[str, Any] = {}
        for layer in layers:
            merged.update({k: v for k, v in layer.items() if v is not None})
        settings = cls(**{k: _coerce(k, v) for k, v in merged.items()})
        if settings.state_keys_file and "state_keys" not in _keys_given(layers):
            settings = replace(settings, state_keys=read_keys_file(settings.state_keys_file))
        return settings.check()

    def check(self) -> RunSettings:
        if self.transport not in ("stdio", "http"):
            raise SystemExit(f"nimblemcp: unknown transport {self.transport!r} (use stdio or http)")
        if self.log_format not in ("text", "json"):
            raise SystemExit(f"nimblemcp: --log-format must be text or json, not {self.log_format!r}")
        if self.engine not in ("nimblemcp", "uvicorn"):
            raise SystemExit(f"nimblemcp: --engine must be nimblemcp or uvicorn, not {self.engine!r}")
        if self.workers < 1:
            raise SystemExit("nimblemcp: --workers must be at least 1")
        if self.workers > 1 and self.transport != "http":
            raise SystemExit("nimblemcp: --workers needs --transport http")
        if self.ssl_certfile is None and (self.ssl_keyfile or self.ssl_keyfile_password or self.ssl_ca_certs):
            raise SystemExit("nimblemcp: --ssl-keyfile, --ssl-keyfile-password and --ssl-ca-certs need --ssl-certfile")
        if self.legacy_sse and (self.transport != "http" or self.workers > 1):
            # Its sessions live in one process: the GET and the POSTs must meet there.
            raise SystemExit("nimblemcp: --legacy-sse needs --transport http and one worker")
        return self

    # -- reporting ---------------------------------------------------------------------

    def masked(self) -> dict[str, Any]:
        """These settings as JSON-ready data, secrets masked (printed on start-up)."""
        data = asdict(self)
        keys = data.pop("state_keys")
        data["state_keys"] = None if keys is None else f"<{len(keys)} key(s), first seals>"
        data["redis_url"] = None if self.redis_url is None else mask_url(self.redis_url)
        if self.ssl_keyfile_password is not None:
            data["ssl_keyfile_password"] = "***"
        for key in ("allowed_hosts", "allowed_origins"):
            if data[key] is not None:
                data[key] = list(data[key])
        return data

    def server_settings(self) -> ServerSettings:
        return ServerSettings(self.state_keys, self.redis_url)


def mask_url(url: str) -> str:
    """`redis://user:secret@host:6379/0` -> `redis://user:***@host:6379/0`."""
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(url)
    if parts.password is None:
        return url
    user = parts.username or ""
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit(parts._replace(netloc=f"{user}:***@{host}"))


def read_keys_file(path: str) -> tuple[str, ...]:
    """One key per line (the first seals, all open); blank lines and `#` comments skipped."""
    from pathlib import Path

    try:
        lines = Path(path).read_text().splitlines()
    except OSError as exc:
        raise SystemExit(f"nimblemcp: cannot read state keys file: {exc.strerror} ({path})") from None
    keys = tuple(s for line in lines if (s := line.split("#", 1)[0].strip()))
    if not keys:
        raise SystemExit(f"nimblemcp: state keys file {path} holds no key (make one: nimblemcp keys new)")
    return keys


def _keys_given(layers: tuple[dict[str, Any], ...]) -> set[str]:
    # Explicit keys in a later layer than the keys file win; simplest rule: the file is
    # used unless the same or a later layer also gives keys directly.
    last_file = max((i for i, layer in enumerate(layers) if layer.get("state_keys_file")), default=-1)
    return {"state_keys"} if any(layer.get("state_keys") for layer in layers[last_file + 1:]) else set()


def _field(key: str, where: str) -> str:
    name = key.replace("-", "_")
    if name not in {f.name for f in fields(RunSettings)}:
        raise SystemExit(f"nimblemcp: {where}: unknown option {key!r}")
    return name


def _coerce(name: str, value: Any) -> Any:
    try:
        if name in ("port", "workers"):
            return int(value)
        if name == "shutdown_timeout":
            return float(value)
        if name == "max_body":
            return None if value in ("", "none") else int(value)
        if name in ("proxy_headers", "legacy_sse"):
            return value if isinstance(value, bool) else str(value).lower() in ("1", "true", "yes", "on")
        if name in ("allowed_hosts", "allowed_origins", "state_keys", "forward_headers"):
            items = value.split(",") if isinstance(value, str) else list(value)
            return tuple(s.strip() for s in items if str(s).strip())
        return str(value)
    except (TypeError, ValueError):
        raise SystemExit(f"nimblemcp: bad value for {name}: {value!r}") from None


# -- the command ---------------------------------------------------------------------------


def add_arguments(run: argparse.ArgumentParser) -> None:
    """The `run` options (`cli._run_options.OPTIONS`); every default is None so that
    'not given' is visible."""
    import argparse

    from nimblemcp.cli._run_options import BOOL, OPTIONS, SHORT

    run.add_argument("target", nargs="?", help="path/to/server.py[:object] or package.module[:object]")
    shorts = {long: short for short, long in SHORT.items()}
    for flag, spec in OPTIONS:
        if spec.get("action") == BOOL:
            spec = {**spec, "action": argparse.BooleanOptionalAction}
        run.add_argument(*((shorts[flag],) if flag in shorts else ()), flag, **spec)


def main(args: argparse.Namespace) -> None:
    from nimblemcp.cli import endpoint_url, load_server

    flags = {k: v for k, v in vars(args).items() if k not in ("command", "target", "config", "verbose")}
    config = args.config or os.environ.get(ENV_PREFIX + "CONFIG")
    file_layer = RunSettings.from_config_file(config) if config else {}
    env_layer = RunSettings.from_env()
    settings = RunSettings.build(file_layer, env_layer, flags)
    worker = os.environ.get(_WORKER_ENV)
    if settings.transport == "stdio":  # before the module runs: its print() is not protocol
        from nimblemcp.transports.stdio.server import protect_stdout

        protect_stdout()
    server = _openapi_server(settings, args.target) if settings.openapi else load_server(_target(args.target))
    settings.server_settings().apply(server)
    if settings.transport == "stdio":  # its own default grace (2 s) unless one was given
        given = any(layer.get("shutdown_timeout") is not None for layer in (file_layer, env_layer, flags))
        server.run("stdio", **({"shutdown_timeout": settings.shutdown_timeout} if given else {}))
        return
    if settings.workers > 1 and worker is None:
        missing = []
        if not (settings.state_keys or server.state_options.keys):
            missing.append("state keys (--state-keys-file FILE or NIMBLEMCP_STATE_KEYS; "
                           "make one with `nimblemcp keys new`)")
        if not (settings.redis_url or server.backends.store is not None):
            missing.append("a Redis URL (--redis-url or NIMBLEMCP_REDIS_URL)")
        if missing:
            raise SystemExit(f"nimblemcp: --workers {settings.workers} runs separate processes that "
                             f"must share state; missing: {'; and '.join(missing)}")
    if worker is None and settings.workers > 1:
        _check_port(settings)
        raise SystemExit(_supervise(settings))

    def started(_host: str, port: int) -> None:
        # Once it listens (the lifespan has started): the endpoint first, scripts read
        # it; the settings with -v. Of several workers, the first one says it.
        if worker not in (None, "0"):
            return
        scheme = "https" if settings.ssl_certfile else "http"
        _say(settings, f"serving {server.name!r} over Streamable HTTP at "
                       f"{endpoint_url(settings.host, port, settings.path, scheme)}")
        if settings.legacy_sse:
            _say(settings, "and over the 2024-11-05 HTTP+SSE transport at "
                           f"{endpoint_url(settings.host, port, '/sse', scheme)}")
        if args.verbose:
            _announce(settings)

    from nimblemcp.errors import CannotListen

    try:
        _serve_http(server, settings, worker, started)
    except CannotListen as exc:
        _fail(settings, f"{exc}; choose another port with --port (or NIMBLEMCP_PORT)")


def _target(target: str | None) -> str:
    if not target:
        raise SystemExit("nimblemcp: run needs a server (path/to/server.py[:object]) or --openapi URL_OR_FILE")
    return target


def _openapi_server(settings: RunSettings, target: str | None) -> Server:
    """The server of `--openapi`: the document's operations as tools."""
    if target:
        raise SystemExit(f"nimblemcp: give a server ({target}) or --openapi, not both")
    from nimblemcp.server._server import Server

    try:
        return Server.from_openapi(settings.openapi, base_url=settings.base_url,
                                   forward_headers=settings.forward_headers)
    except (OSError, ValueError, ImportError) as exc:
        raise SystemExit(f"nimblemcp: --openapi {settings.openapi}: {exc}") from None


def _serve_http(server: Server, settings: RunSettings, worker: str | None,
                started: Callable[[str, int], None]) -> None:
    from nimblemcp.serving import HttpServeOptions, TlsFiles, run_http
    from nimblemcp.transports.http.security import HttpSecurity

    security = HttpSecurity().override(
        allowed_hosts=None if settings.allowed_hosts is None else tuple(settings.allowed_hosts),
        allowed_origins=tuple(settings.allowed_origins) or None, max_body=settings.max_body)
    tls = None if settings.ssl_certfile is None else TlsFiles(
        settings.ssl_certfile, settings.ssl_keyfile, settings.ssl_keyfile_password, settings.ssl_ca_certs)
    options = HttpServeOptions(
        shutdown_timeout=settings.shutdown_timeout, log_level=settings.log_level,
        root_path=settings.root_path, proxy_headers=settings.proxy_headers,
        forwarded_allow_ips=settings.forwarded_allow_ips, reuse_port=worker is not None,
        log_config=_json_log_config(settings.log_level) if settings.log_format == "json" else None,
        tls=tls)
    run_http(server, settings.host, settings.port, settings.path, engine=settings.engine, options=options,
             security=security, legacy_sse=settings.legacy_sse, on_started=started)


def _check_port(settings: RunSettings) -> None:
    """Before starting workers: the port can be bound. They bind it with SO_REUSEPORT;
    so does this probe, closed at once, before any worker listens beside it."""
    from nimblemcp.errors import CannotListen
    from nimblemcp.serving import _listen

    try:
        probe = _listen(settings.host, settings.port, reuse_port=True)
    except CannotListen as exc:
        _fail(settings, f"{exc}; choose another port with --port (or NIMBLEMCP_PORT)")
    for sock in probe:
        sock.close()


def _fail(settings: RunSettings, message: str) -> NoReturn:
    """One error line on stderr, in the chosen log format; exit status 1."""
    _say(settings, message, level="error")
    raise SystemExit(1)


def _announce(settings: RunSettings) -> None:
    import json

    line = json.dumps({"nimblemcp_settings": settings.masked()}, sort_keys=True)
    print(line if settings.log_format == "json" else f"nimblemcp: settings {line}",
          file=sys.stderr, flush=True)


def _say(settings: RunSettings, message: str, level: str = "info") -> None:
    """One start-up or supervisor line on stderr, in the chosen log format."""
    if settings.log_format == "json":
        import json

        line = json.dumps({"level": level, "logger": "nimblemcp", "message": message})
    else:
        line = f"nimblemcp: {message}"
    print(line, file=sys.stderr, flush=True)


def _json_log_config(level: str) -> dict[str, Any]:
    handler = {"class": "logging.StreamHandler", "formatter": "json", "stream": "ext://sys.stderr"}
    return {
        "version": 1, "disable_existing_loggers": False,
        "formatters": {"json": {"()": "nimblemcp.cli._jsonlog.JsonFormatter"}},
        "handlers": {"default": handler},
        "root": {"handlers": ["default"], "level": level.upper()},
        "loggers": {name: {"handlers": [], "level": level.upper(), "propagate": True}
                    for name in ("uvicorn", "uvicorn.error", "uvicorn.access", "nimblemcp")},
    }


# -- several workers -------------------------------------------------------------------


def _supervise(settings: RunSettings) -> int:
    """Start `settings.workers` copies of this command on one port; pass SIGTERM/SIGINT
    on and wait for them; restart a worker that dies on its own."""
    import signal
    import subprocess
    import time

    argv = [sys.executable, "-m", "nimblemcp", *sys.argv[1:]]  # the same command line
    stopping: list[int] = []

    def start(i: int) -> subprocess.Popen[bytes]:
        return subprocess.Popen(argv, env={**os.environ, _WORKER_ENV: str(i)})

    def stop(signum: int, _frame: Any) -> None:
        stopping.append(signum)
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signum)

    procs = [start(i) for i in range(settings.workers)]
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    _say(settings, f"{settings.workers} workers on port {settings.port} "
                   f"(pids {', '.join(str(p.pid) for p in procs)})")
    while not stopping:
        for i, proc in enumerate(procs):
            if proc.poll() is not None and not stopping:
                _say(settings, f"worker {i} (pid {proc.pid}) exited with {proc.returncode}; restarting it")
                time.sleep(0.5)
                procs[i] = start(i)
        time.sleep(0.2)
    deadline = time.monotonic() + settings.shutdown_timeout + 10
    code = 0
    for proc in procs:
        try:
            status = proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            # uvicorn re-raises the signal it stopped on: that is a clean stop.
            code = max(code, 0 if status in (0, -stopping[0]) else abs(status))
        except subprocess.TimeoutExpired:
            proc.kill()
            code = 1
    return code
