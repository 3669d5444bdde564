"""The HTTP child of `nimblemcp dev`: one server generation, with the request log.

`python -m nimblemcp.cli._dev_http TARGET --host H --port P --path /mcp` loads the
server, wraps the same ASGI app `run_http` serves (`secure_app`) in
`_devlog.RequestLog`, and serves it under uvicorn until the supervisor in `_dev`
stops it for a reload. Logging goes to stderr at INFO, so a handler's unexpected
exception shows with its traceback.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import sys
from typing import Any

from nimblemcp._extras import needs_extra
from nimblemcp.cli import load_server
from nimblemcp.cli._devlog import RequestLog


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="nimblemcp dev (http child)")
    parser.add_argument("target")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--path", default="/mcp")
    args = parser.parse_args(argv)
    logging.basicConfig(stream=sys.stderr, level=logging.INFO,
                        format="%(levelname)s %(name)s: %(message)s")
    with needs_extra("http", "HTTP serving"):
        import uvicorn

    from nimblemcp.transports.http_security import secure_app

    server = load_server(args.target)
    allowed_hosts = None if args.host in ("127.0.0.1", "localhost", "::1") else ["*"]
    app = RequestLog(secure_app(server, path=args.path, allowed_hosts=allowed_hosts))
    config = uvicorn.Config(app, host=args.host, port=args.port, lifespan="on",
                            log_level="warning", server_header=False,
                            timeout_graceful_shutdown=1)

    class _Uvicorn(uvicorn.Server):
        async def shutdown(self, sockets: Any = None) -> None:
            server.close_listeners()  # listen streams never end by themselves
            await super().shutdown(sockets)

    with contextlib.suppress(KeyboardInterrupt):
        _Uvicorn(config).run()


if __name__ == "__main__":
    main(sys.argv[1:])
