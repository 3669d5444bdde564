"""`nimblemcp run`'s options as data.

`OPTIONS` is the one list of run's options: `cli.run.add_arguments` gives each to
argparse as it stands (`BOOL` becomes `argparse.BooleanOptionalAction`, `SHORT` adds
short spellings). Imports nothing.
"""

from __future__ import annotations

from typing import Any

__all__ = ["BOOL", "OPTIONS", "SHORT"]

BOOL = "bool"  # `action=BOOL`: argparse.BooleanOptionalAction (`--x` / `--no-x`)
FLAG = "store_true"  # `action=FLAG`: a flag without a value (`-v`)
SHORT = {"-v": "--verbose"}  # short spellings of long options

# (flag, keyword arguments of `add_argument`); every default is None ("not given").
OPTIONS: tuple[tuple[str, dict[str, Any]], ...] = (
    ("--transport", {"choices": ("stdio", "http")}),
    ("--config", {"help": "TOML file of options (top level or [run]); env NIMBLEMCP_CONFIG"}),
    ("--host", {"help": "HTTP bind address (default 127.0.0.1)"}),
    ("--port", {"type": int, "help": "HTTP port (default 8000)"}),
    ("--path", {"help": "HTTP endpoint path (default /mcp)"}),
    ("--allowed-hosts", {"metavar": "H1,H2",
                         "help": "Host header values accepted besides localhost ('*' = any); behind "
                                 "nginx `proxy_pass http://pool;` add the upstream name (pool)"}),
    ("--allowed-origins", {"metavar": "O1,O2", "help": "Origins accepted besides localhost"}),
    ("--root-path", {"help": "path prefix the proxy strips (ASGI root_path)"}),
    ("--proxy-headers", {"action": BOOL, "default": None,
                         "help": "trust X-Forwarded-For/Proto from --forwarded-allow-ips (default on)"}),
    ("--forwarded-allow-ips", {"metavar": "IPS",
                               "help": "proxies trusted for X-Forwarded-* (default 127.0.0.1,::1; '*' = any)"}),
    ("--workers", {"type": int, "help": "processes sharing the port (needs state keys and Redis)"}),
    ("--log-format", {"choices": ("text", "json")}),
    ("--log-level", {"choices": ("critical", "error", "warning", "info", "debug")}),
    ("--shutdown-timeout", {"type": float,
                            "help": "seconds in-flight requests get at shutdown (default 10 over HTTP, 2 on stdio)"}),
    ("--max-body", {"type": int, "help": "request body limit in bytes"}),
    ("--state-keys-file", {"metavar": "FILE",
                           "help": "requestState keys, one a line, first seals (nimblemcp keys new)"}),
    ("--redis-url", {"help": "shared store and bus for several instances"}),
    ("--legacy-sse", {"action": BOOL, "default": None,
                      "help": "also serve the deprecated 2024-11-05 HTTP+SSE transport (GET /sse, POST /messages/)"}),
    ("--verbose", {"action": FLAG, "default": None,
                   "help": "also print the settings served with (secrets masked) once listening"}),
    ("--engine", {"choices": ("uvicorn", "nimblemcp"),
                  "help": "HTTP server: uvicorn (default) or nimblemcp's own, faster engine "
                          "(opt-in; httptools, one write per response)"}),
    ("--ssl-certfile", {"metavar": "PEM", "help": "serve HTTPS with this certificate chain"}),
    ("--ssl-keyfile", {"metavar": "PEM", "help": "its private key (if not in --ssl-certfile)"}),
    ("--ssl-keyfile-password", {"metavar": "PASSWORD",
                                "help": "the key's password (visible to other users here: prefer "
                                        "NIMBLEMCP_SSL_KEYFILE_PASSWORD or the config file)"}),
    ("--ssl-ca-certs", {"metavar": "PEM", "help": "require client certificates signed by these CAs"}),
    ("--openapi", {"metavar": "URL_OR_FILE",
                   "help": "serve the HTTP API an OpenAPI 3 document describes (instead of a target)"}),
    ("--base-url", {"metavar": "URL", "help": "where --openapi's calls go (default: the document's server)"}),
    ("--forward-headers", {"metavar": "H1,H2",
                           "help": "headers of each MCP request passed on to the --openapi API"}),
)
