"""The cyclic garbage collector tuned for serving HTTP: the one speed measure of its kind
that the performance policy keeps (CONTRIBUTING.md; the numbers are in
benchmarks/README.md, "What the policy kept").

At the end of start-up (`McpHttpApp` with `freeze_gc=True`, what `run_http` serves),
everything long-lived has been built: it is collected once and frozen out of the
collector (`gc.freeze()`), and the young generation is collected less often. Under load
that generation is the requests in flight, freed by reference counting and never
garbage: at CPython's default threshold a 64-connection run spent microseconds per
request traversing them and collecting nothing, plus a pause every few thousand
requests. Only public `gc` functions are used, and nothing a request sees changes:
tests/test_serving_gc.py holds the answers with and without it equal.
"""

from __future__ import annotations

import gc

__all__ = ["YOUNG_GC_THRESHOLD", "settle_gc"]

# Young-generation threshold while serving (CPython's default is 700).
YOUNG_GC_THRESHOLD = 10_000


def settle_gc() -> None:
    """Collect and freeze what start-up built; raise the young threshold. An application
    that turned the collector off (threshold 0) keeps it off."""
    gc.collect()
    gc.freeze()
    young, middle, old = gc.get_threshold()
    if young:
        gc.set_threshold(max(young, YOUNG_GC_THRESHOLD), middle, old)
