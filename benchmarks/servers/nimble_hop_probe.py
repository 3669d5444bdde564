"""nimblemcp's sync `echo`, timing its worker-thread hop: where a sync tool's latency goes.

    python -m nimblemcp run nimble_hop_probe.py --transport http --port 8000 --log-level warning
    wrk -t1 -c64 -d5s -s post.lua http://127.0.0.1:8000/mcp      # then stop the server (SIGTERM/^C)

On exit it prints to stderr, over the calls after the first fifth (warm-up): how long a
call waited from its submission to a worker thread until the worker began it
(`start`), and until its result was back on the loop, the awaiting request's future
resolved (`end`). `HOP_SWITCH_INTERVAL=0.0005` sets `sys.setswitchinterval` first.
It wraps the submit function of `server/_invoke.py` (an internal name): a probe for
benchmarks/README.md, not an API.
"""

import atexit
import os
import sys
import time

from nimblemcp import Server
from nimblemcp.server import _invoke

if os.environ.get("HOP_SWITCH_INTERVAL"):
    sys.setswitchinterval(float(os.environ["HOP_SWITCH_INTERVAL"]))

server = Server("bench-nimble", "1.0.0")
starts: list[float] = []
ends: list[float] = []
_submit = _invoke._submit
_clock = time.perf_counter


def _timed_submit(loop, fn, kwargs):
    submitted = _clock()

    def call(**kw):
        starts.append(_clock() - submitted)
        return fn(**kw)

    future = _submit(loop, call, kwargs)
    future.add_done_callback(lambda _: ends.append(_clock() - submitted))
    return future


_invoke._submit = _timed_submit


@server.tool
def echo(text: str) -> str:
    """Echo the text back."""
    return text


def _quantile(kept: list[float], p: float) -> float:
    return kept[int(p * (len(kept) - 1))] * 1e3


def _report() -> None:
    for name, samples in (("start", starts), ("end", ends)):
        kept = sorted(samples[len(samples) // 5:])
        if kept:
            print(f"{name}: n={len(kept)} " + " ".join(f"p{p * 100:g}={_quantile(kept, p):.3f}" for p in
                                                       (0.5, 0.9, 0.99, 0.999)) + f" max={kept[-1] * 1e3:.3f} ms",
                  file=sys.stderr, flush=True)


atexit.register(_report)
