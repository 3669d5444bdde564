"""tests/interop/nimble_server.py over HTTP with the 2025-11-25 session leg turned off.

    python modern_only_http.py PORT
"""

from __future__ import annotations

import inspect
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from nimble_server import server

from nimblemcp.serving import run_http

if __name__ == "__main__":
    options: dict[str, object] = {"port": int(sys.argv[1])}
    if "options" in inspect.signature(run_http).parameters:  # one spelling per option (issue 32)
        from nimblemcp.serving import HttpServeOptions

        options["options"] = HttpServeOptions(log_level="warning")
    else:
        options["log_level"] = "warning"
    if "legacy_sessions" in inspect.signature(run_http).parameters:
        options["legacy_sessions"] = False
    run_http(server, **options)  # type: ignore[arg-type]
