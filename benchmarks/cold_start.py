"""Cold start: spawn a stdio server -> first `server/discover` response.

    python benchmarks/cold_start.py [--rounds 20]
    python benchmarks/cold_start.py --nimble-only --against /other/checkout/src   # A/B

Every tree's bytecode is compiled first (`compileall`): an installed package has its
`.pyc` files, and a shell with PYTHONDONTWRITEBYTECODE=1 would otherwise time the
compiler at every start. `--against SRC` adds the same two nimblemcp rows for another
checkout's `src/` (its own PYTHONPATH, same interpreter), to compare two builds in one
interleaved run; `--nimble-only` leaves the peers out.

Every round spawns each server once (order rotated per round, so drift and cache
effects spread evenly) and times from Popen to the first response line to a
2026-07-28 `server/discover`. A peer that answers `server/discover` with an error
gets an `initialize` instead, and the output says so. Baselines: `python -c pass`, and
the floor any asyncio server pays, `python -c "import asyncio"` (same interpreter).

    python benchmarks/cold_start.py --callgrind [--against SRC]

counts instructions instead (valgrind's callgrind; stable on a loaded machine, where
timings are not): each row runs once under valgrind with PYTHONHASHSEED=0, a server
answering one `server/discover` from stdin and exiting at its end (so the count also
holds the shutdown). The "beyond asyncio" column is each row less the
`import asyncio` row: what the library itself costs.

The `nimblemcp-cli http` row is the HTTP server's start: `nimblemcp run FILE
--transport http --port P` (nimblemcp's engine; uvloop and httptools when installed),
timed from Popen to the first answer to a 2026-07-28 `server/discover` POSTed to `/mcp`
(the driver retries its connection until the port listens; nothing else is sent
first). The server is then stopped with SIGTERM. Under `--callgrind` the count runs
from exec to the end of that graceful stop. `--no-http` leaves the row out.
"""

from __future__ import annotations

import argparse
import http.client
import json
import re
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

from _common import (
    HERE,
    INITIALIZED,
    MAIN_PY,
    NIMBLE_PY,
    SERVERS,
    VERSION,
    discover_request,
    ensure_peers,
    env_for,
    initialize_request,
    line,
    median,
    pct,
    save,
    say,
    spawn,
    stdio_commands,
    table,
)


def first_response(proc: subprocess.Popen[bytes]) -> dict:
    assert proc.stdout is not None
    while True:
        raw = proc.stdout.readline()
        if not raw:
            raise RuntimeError("server closed stdout before answering")
        try:
            msg = json.loads(raw)
        except ValueError:
            continue  # a stray non-protocol line
        if "id" in msg:
            return msg


def one_spawn(name: str, argv: list[str], src: str | None = None) -> tuple[float, str]:
    t0 = time.perf_counter()
    if src is None:
        proc = spawn(argv, name)
    else:  # another checkout's tree, first on the path
        proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.DEVNULL, cwd=str(SERVERS), bufsize=0,
                                env={**env_for(name), "PYTHONPATH": src})
    assert proc.stdin is not None
    try:
        proc.stdin.write(line(discover_request()))
        proc.stdin.flush()
        msg = first_response(proc)
        how = "server/discover"
        if "error" in msg:
            proc.stdin.write(line(initialize_request()))
            proc.stdin.flush()
            msg = first_response(proc)
            how = "initialize (fallback: no server/discover)"
            if "error" in msg:
                raise RuntimeError(f"{name}: {msg}")
        elapsed = time.perf_counter() - t0
        if how.startswith("initialize"):
            proc.stdin.write(line(INITIALIZED))
    finally:
        try:
            proc.stdin.close()
            proc.wait(timeout=5)
        except Exception:
            proc.kill()
            proc.wait()
    return elapsed, how


def http_argv(port: int) -> list[str]:
    """`nimblemcp run FILE --transport http` on `port` (the CLI's defaults otherwise)."""
    return [NIMBLE_PY, "-m", "nimblemcp", "run", str(SERVERS / "nimble_server.py"), "--transport", "http",
            "--port", str(port)]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def discover_over_http(port: int, proc: subprocess.Popen[bytes], patience: float) -> None:
    """POST one `server/discover` to `/mcp` as soon as the port takes a connection."""
    body = json.dumps(discover_request(), separators=(",", ":"))
    headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream",
               "MCP-Protocol-Version": VERSION, "Mcp-Method": "server/discover"}
    deadline = time.perf_counter() + patience
    while True:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=patience)
        try:
            conn.connect()
        except ConnectionRefusedError:
            conn.close()
            if proc.poll() is not None:
                raise RuntimeError(f"the HTTP server exited with status {proc.returncode} before answering") from None
            if time.perf_counter() > deadline:
                raise
            time.sleep(0.0005)
            continue
        try:
            conn.request("POST", "/mcp", body=body, headers=headers)
            answer = conn.getresponse()
            data = answer.read()
        finally:
            conn.close()
        if answer.status != 200 or b'"supportedVersions"' not in data:
            raise RuntimeError(f"HTTP {answer.status}: {data[:300]!r}")
        return


def stop(proc: subprocess.Popen[bytes], timeout: float = 10.0) -> None:
    """SIGTERM (a graceful stop), then wait; kill if it hangs."""
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def one_http_spawn(src: str | None = None) -> tuple[float, str]:
    port = free_port()
    env = env_for("nimblemcp")
    if src is not None:
        env["PYTHONPATH"] = src
    t0 = time.perf_counter()
    proc = subprocess.Popen(http_argv(port), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, cwd=str(SERVERS), env=env)
    try:
        discover_over_http(port, proc, patience=30.0)
        elapsed = time.perf_counter() - t0
    finally:
        stop(proc)
    return elapsed, "POST server/discover"


def baseline(py: str) -> float:
    t0 = time.perf_counter()
    subprocess.run([py, "-c", "pass"], check=True)
    return time.perf_counter() - t0


def floor(py: str) -> float:
    """What any asyncio server pays before its own code runs."""
    t0 = time.perf_counter()
    subprocess.run([py, "-c", "import asyncio"], check=True)
    return time.perf_counter() - t0


def instructions(argv: list[str], src: str | None = None, stdin: bytes = b"") -> int:
    """Instructions executed by `argv` from exec to exit (callgrind's total)."""
    env = {**env_for("nimblemcp"), "PYTHONHASHSEED": "0"}
    if src is not None:
        env["PYTHONPATH"] = src
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "cg.out"
        subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", *argv], input=stdin,
                       env=env, cwd=str(SERVERS), check=True, capture_output=True)
        m = re.search(r"^(?:summary|totals): (\d+)", out.read_text(errors="replace"), re.M)
    if m is None:
        raise RuntimeError(f"no callgrind total for {argv}")
    return int(m.group(1))


def http_instructions(src: str | None = None) -> int:
    """Instructions of `nimblemcp run --transport http` from exec through one answered
    `server/discover` to the end of its graceful stop (SIGTERM)."""
    env = {**env_for("nimblemcp"), "PYTHONHASHSEED": "0"}
    if src is not None:
        env["PYTHONPATH"] = src
    port = free_port()
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "cg.out"
        proc = subprocess.Popen(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", *http_argv(port)],
                                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                env=env, cwd=str(SERVERS))
        try:
            discover_over_http(port, proc, patience=300.0)
        finally:
            stop(proc, timeout=300.0)
        m = re.search(r"^(?:summary|totals): (\d+)", out.read_text(errors="replace"), re.M)
    if m is None:
        raise RuntimeError("no callgrind total for the HTTP server")
    return int(m.group(1))


def count_instructions(other: str | None, with_http: bool = True) -> None:
    cmds = {k: v for k, v in stdio_commands().items() if k.startswith("nimblemcp")}
    discover = line(discover_request())
    jobs: dict[str, tuple[list[str], str | None, bytes]] = {
        "python -c pass": ([NIMBLE_PY, "-c", "pass"], None, b""),
        "python -c 'import asyncio' (floor)": ([NIMBLE_PY, "-c", "import asyncio"], None, b""),
        "python -c 'import asyncio, orjson'": ([NIMBLE_PY, "-c", "import asyncio, orjson"], None, b""),
    }
    for name, argv in cmds.items():
        jobs[name] = (argv, None, discover)
        if other:
            jobs[f"{name} (other)"] = (argv, other, discover)
    counts = {name: instructions(*job) for name, job in jobs.items()}
    if with_http:
        counts["nimblemcp-cli http"] = http_instructions()
        if other:
            counts["nimblemcp-cli http (other)"] = http_instructions(other)
    floor_count = counts["python -c 'import asyncio' (floor)"]
    rows = [[n, f"{c / 1e6:.1f}", f"{(c - floor_count) / 1e6:+.1f}"] for n, c in counts.items()]
    out = ("Cold start in instructions (callgrind, millions; servers answer one server/discover, then exit)\n\n"
           + table(["run", "M instructions", "beyond asyncio"], rows))
    if other:
        for name in [*cmds, *(["nimblemcp-cli http"] if with_http else [])]:
            mine, theirs = counts[name] - floor_count, counts[f"{name} (other)"] - floor_count
            out += f"\n\n{name}: beyond asyncio this tree / other tree = {mine / 1e6:.1f}M / {theirs / 1e6:.1f}M = {mine / theirs:.3f}"
    say(out)
    save("cold_start_callgrind", out, {"instructions": counts})


def compile_tree(py: str, src: str) -> None:
    subprocess.run([py, "-m", "compileall", "-q", src], check=True, stdout=subprocess.DEVNULL)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--against", help="another checkout's src/ directory, timed as 'nimblemcp (other)'")
    ap.add_argument("--nimble-only", action="store_true", help="leave the peers out")
    ap.add_argument("--callgrind", action="store_true", help="count instructions (valgrind) instead of timing")
    ap.add_argument("--no-http", action="store_true", help="leave out the HTTP server's row (`--transport http`)")
    args = ap.parse_args()
    ensure_peers()
    own_src = str(HERE.parent / "src")
    compile_tree(NIMBLE_PY, own_src)
    if args.callgrind:
        other = str(Path(args.against).resolve()) if args.against else None
        if other:
            compile_tree(NIMBLE_PY, other)
        count_instructions(other, with_http=not args.no_http)
        return
    cmds = stdio_commands()
    if args.nimble_only:
        cmds = {k: v for k, v in cmds.items() if k.startswith("nimblemcp")}
    jobs: dict[str, object] = {"python -c pass": lambda: (baseline(NIMBLE_PY), "exit"),
                               "python -c 'import asyncio' (floor)": lambda: (floor(NIMBLE_PY), "exit")}
    # The main interpreter's site-packages runs a .pth hook at every start (see
    # _peers.sh); the "main interpreter" rows show what that costs (when nimblemcp is
    # installed there).
    if not args.nimble_only and subprocess.run([MAIN_PY, "-c", "import nimblemcp"], capture_output=True).returncode == 0:
        cmds["nimblemcp (main interpreter)"] = [MAIN_PY, str(SERVERS / "nimble_server.py")]
        jobs["python -c pass (main interpreter)"] = lambda: (baseline(MAIN_PY), "exit")
    for name, argv in cmds.items():
        jobs[name] = (lambda n=name, a=argv: one_spawn(n, a))
    if not args.no_http:
        jobs["nimblemcp-cli http"] = one_http_spawn
    if args.against:
        other = str(Path(args.against).resolve())
        compile_tree(NIMBLE_PY, other)
        for name in ("nimblemcp", "nimblemcp-cli"):
            jobs[f"{name} (other)"] = (lambda n=name, a=cmds[name]: one_spawn(n, a, other))
        if not args.no_http:
            jobs["nimblemcp-cli http (other)"] = (lambda: one_http_spawn(other))
    names = list(jobs)
    times: dict[str, list[float]] = {n: [] for n in names}
    how: dict[str, str] = {}
    for fn in jobs.values():  # warm the page cache and .pyc files; not counted
        fn()  # type: ignore[operator]
    for r in range(args.rounds):
        order = names[r % len(names):] + names[:r % len(names)]
        for n in order:
            t, h = jobs[n]()  # type: ignore[operator]
            times[n].append(t)
            how[n] = h
    ref = median(times["mcp"]) if "mcp" in times else median(times["nimblemcp"])
    rows: list[list[str]] = []
    data: dict[str, object] = {}
    for n in names:
        m = median(times[n])
        data[n] = {"median_ms": m * 1e3, "p90_ms": pct(times[n], 90) * 1e3,
                   "min_ms": min(times[n]) * 1e3, "answered": how[n]}
        rows.append([n, f"{m * 1e3:.1f}", f"{min(times[n]) * 1e3:.1f}",
                     f"{pct(times[n], 90) * 1e3:.1f}", f"{ref / m:.2f}x", how[n]])
    versus = "mcp" if "mcp" in times else "nimblemcp"
    out = (f"Cold start, spawn -> first response over stdio ({args.rounds} interleaved rounds)\n\n"
           + table(["server", "median ms", "min ms", "p90 ms", f"speed vs {versus}", "first request"], rows))
    if "mcp" in times:
        out += (f"\n\nnimblemcp vs mcp: {ref / median(times['nimblemcp']):.2f}x (target >= 4x); "
                f"via CLI: {ref / median(times['nimblemcp-cli']):.2f}x")
    if args.against:
        out += (f"\n\nthis tree / other tree: {median(times['nimblemcp']) / median(times['nimblemcp (other)']):.3f}"
                f" (server.run()), {median(times['nimblemcp-cli']) / median(times['nimblemcp-cli (other)']):.3f} (CLI)")
        if not args.no_http:
            out += (f", {median(times['nimblemcp-cli http']) / median(times['nimblemcp-cli http (other)']):.3f}"
                    " (CLI, HTTP)")
    fl = median(times["python -c 'import asyncio' (floor)"])
    beyond = {n: (median(times[n]) - fl) * 1e3 for n in names if n.startswith("nimblemcp")}
    out += "\n\nbeyond the asyncio floor (median ms): " + ", ".join(f"{n} {v:.1f}" for n, v in beyond.items())
    say(out)
    save("cold_start", out, {"rounds": args.rounds, "results": data})


if __name__ == "__main__":
    main()
