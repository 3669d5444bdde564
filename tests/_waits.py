"""Blocking waits for tests that drive a real subprocess from plain (sync) test code.

`wait_until(check, what)` polls until `check()` is true; `wait_for_file(path)` waits
until a mark file has its content (`write_text` creates the file empty before it
writes, so a reader that only waits for the name can read ''). Both give up after
`HANG` seconds, a guard against a hung test and never a measurement, with an
AssertionError that says what never happened (plus `why()`, e.g. the server's stderr).
The async twin for HTTP tests is `_task_http.wait_for_file`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

HANG = 30.0
_POLL = 0.01


def wait_until(check: Callable[[], object], what: str, *, why: Callable[[], object] | None = None,
               hang: float = HANG) -> None:
    deadline = time.monotonic() + hang
    while not check():
        if time.monotonic() >= deadline:
            raise AssertionError(f"{what} never happened" + (f"; {why()}" if why is not None else ""))
        time.sleep(_POLL)


def wait_for_file(path: Path, *, why: Callable[[], object] | None = None, hang: float = HANG) -> None:
    wait_until(lambda: path.exists() and path.stat().st_size > 0, f"{path.name} appearing", why=why, hang=hang)
