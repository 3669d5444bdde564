"""nimblemcp's sync `echo`, timing its worker-thread hop: where a sync tool's latency goes.

    python -m nimblemcp run nimble_hop_probe.py --transport http --port 8000 --log-level warning
    wrk -t1 -c64 -d5s -s post.lua http://127.0.0.1:8000/mcp      # then stop the server (SIGTERM/^C)

On exit it prints to stderr, over the calls after the first fifth (warm-up): how long a
call waited from its submission to a worker thread until the worker began it
(`start`), and until its result was back on the loop, the awaiting request's future
resolved (`end`). `HOP_SWITCH_INTERVAL=0.0005` sets `sys.setswitchinterval` first.
`HOP_BATCH_WAIT=0` turns off the workers' SCHED_BATCH wait (round six) for an A/B.
It wraps the hand-off (`Workers.call`) where the server calls it, `server/_dispatch.py` (the
lean lane that serves this `echo`: `_call`, values by position, and `_submit`) and
`server/_invoke.py` (the general lane): internal
names, a probe for benchmarks/README.md, not an API. On exit it also prints the
server's context switches per timed call, loop thread and worker threads apart.
"""

import atexit
import os
import sys
import time

from nimblemcp import Server
from nimblemcp.server import _dispatch, _invoke, _workers

if os.environ.get("HOP_SWITCH_INTERVAL"):
    sys.setswitchinterval(float(os.environ["HOP_SWITCH_INTERVAL"]))

server = Server("bench-nimble", "1.0.0")
starts: list[float] = []
ends: list[float] = []
_clock = time.perf_counter


_call = _workers._workers.call


def _timed_call(loop, fn, args, kwargs=None):  # both lanes' hand-off (`Workers.call`)
    submitted = _clock()

    def call(*values, **kw):
        starts.append(_clock() - submitted)
        return fn(*values, **kw)

    future = _call(loop, call, args, kwargs)
    future.add_done_callback(lambda _: ends.append(_clock() - submitted))
    return future


_invoke._submit = _dispatch._submit = _dispatch._call = _timed_call
if os.environ.get("HOP_BATCH_WAIT") == "0":
    _workers._workers.batch_wait = False


@server.tool
def echo(text: str) -> str:
    """Echo the text back."""
    return text


def _quantile(kept: list[float], p: float) -> float:
    return kept[int(p * (len(kept) - 1))] * 1e3


def _switches() -> dict[str, list[int]]:
    """Voluntary and involuntary context switches so far: the loop thread, the rest."""
    out = {"loop": [0, 0], "workers": [0, 0]}
    me = os.getpid()
    for tid in os.listdir(f"/proc/{me}/task"):
        try:
            with open(f"/proc/{me}/task/{tid}/status") as f:
                fields = dict(ln.split(":", 1) for ln in f if ":" in ln)
        except FileNotFoundError:  # a retired worker
            continue
        which = out["loop" if int(tid) == me else "workers"]
        which[0] += int(fields["voluntary_ctxt_switches"])
        which[1] += int(fields["nonvoluntary_ctxt_switches"])
    return out


def _report() -> None:
    calls = len(ends)
    if calls and os.path.isdir("/proc/self/task"):
        for who, (vol, invol) in _switches().items():
            print(f"{who}: {vol / calls:.3f} voluntary + {invol / calls:.3f} involuntary switches per call "
                  f"(whole run, {calls} calls; retired workers not counted)", file=sys.stderr, flush=True)
    for name, samples in (("start", starts), ("end", ends)):
        kept = sorted(samples[len(samples) // 5:])
        if kept:
            print(f"{name}: n={len(kept)} " + " ".join(f"p{p * 100:g}={_quantile(kept, p):.3f}" for p in
                                                       (0.5, 0.9, 0.99, 0.999)) + f" max={kept[-1] * 1e3:.3f} ms",
                  file=sys.stderr, flush=True)


atexit.register(_report)
