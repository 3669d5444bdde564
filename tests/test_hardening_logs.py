"""Issue 12, part A: `Server(forward_logs=True)` has no process-wide side effects."""

from __future__ import annotations

import subprocess
import sys

SCRIPT = """
import logging
logging.basicConfig(level=logging.WARNING)
before = logging.getLogger().level
logging.getLogger("app").setLevel(logging.ERROR)
from nimblemcp import Server
Server("a", forward_logs=True)
Server("b", forward_logs="app")
Server("c", forward_logs="other")
print(before, logging.getLogger().level, logging.getLogger("app").level, logging.getLogger("other").level)
"""


def test_forwarding_never_changes_the_root_level_or_a_level_the_app_set() -> None:
    out = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=60, check=True)
    before, root, app, other = map(int, out.stdout.split())
    assert root == before == 30  # WARNING, untouched
    assert app == 40  # the application's own level is kept
    assert other == 10  # a named logger without a level is opened for forwarding
