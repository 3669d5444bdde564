"""Shared bits for the multi-instance benchmarks (workers.py, nginx_pool.py, listen_fanout.py):
a throw-away Redis, `nimblemcp run --transport http` instances, nginx from the deploy kit,
wrk runs, and per-process CPU time and RSS read from /proc. The wrk benchmarks
(workers.py, nginx_pool.py) share their set-up too: the same options (`wrk_options`),
`WrkBench` (wrk present, Redis, state key, wrk's script), interleaved rounds
(`rotations`) and medians (`summarize`).

Everything runs on 127.0.0.1 with free ports; every process started here is stopped by
its own pid (never by name). The instances run from benchmarks/.venv-nimble (made by
_peers.sh with the [http,redis] extras), exactly as a user would start them.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

from _common import NIMBLE_PY, VERSION, call_request, ensure_peers, median

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
SERVERS_DIR = HERE / "servers"
NGINX_CONF = ROOT / "deploy" / "nginx" / "nimblemcp.conf"
LOGS = Path(tempfile.gettempdir())

BODY = json.dumps(call_request(1), separators=(",", ":"))
HEADERS = {  # the same fixed 2026-07-28 tools/call as http_throughput.py
    "Content-Type": "application/json",
    "Accept": "application/json, text/event-stream",
    "MCP-Protocol-Version": VERSION,
    "Mcp-Method": "tools/call",
    "Mcp-Name": "echo",
}
_UNIT = {"us": 1e-3, "ms": 1.0, "s": 1e3}
CLK_TCK = os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_port(port: int, proc: subprocess.Popen[bytes] | None = None, what: str = "server",
              timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return
        time.sleep(0.05)
    raise RuntimeError(f"{what}: nothing listens on port {port}")


def stop(proc: subprocess.Popen[bytes] | None, timeout: float = 15.0) -> None:
    if proc is None or proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


class Redis:
    """redis-server on a free loopback port, no persistence."""

    def __init__(self) -> None:
        binary = shutil.which("redis-server") or "/usr/bin/redis-server"
        self.port = free_port()
        self.dir = tempfile.mkdtemp(prefix="nimblemcp-bench-redis-")
        self.proc = subprocess.Popen(
            [binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
             "--dir", self.dir], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_port(self.port, self.proc, "redis-server")

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def close(self) -> None:
        stop(self.proc)
        shutil.rmtree(self.dir, ignore_errors=True)


def state_key() -> str:
    out = subprocess.run([NIMBLE_PY, "-c", "from nimblemcp.server._sealing import new_key; print(new_key())"],
                         capture_output=True, text=True, check=True)
    return out.stdout.strip()


def launch(target: str | Path, port: int, name: str, *args: str, env: dict[str, str] | None = None,
           cpus: str | None = None) -> subprocess.Popen[bytes]:
    """`nimblemcp run TARGET --transport http --port PORT ARGS` (pinned to `cpus` with taskset)."""
    argv = [NIMBLE_PY, "-m", "nimblemcp", "run", str(target), "--transport", "http",
            "--port", str(port), "--log-level", "warning", *args]
    if cpus is not None:
        argv = ["taskset", "-c", cpus, *argv]
    full = dict(os.environ, PYTHONUNBUFFERED="1", **(env or {}))
    full.pop("PYTHONPATH", None)
    with (LOGS / f"bench-{name}.log").open("wb") as log:
        proc = subprocess.Popen(argv, stdout=log, stderr=log, env=full, cwd=str(SERVERS_DIR))
    return proc


def children(pid: int) -> list[int]:
    """Direct children of `pid` (scans /proc: this kernel has no task/*/children)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        with contextlib.suppress(OSError):
            stat = Path(f"/proc/{entry}/stat").read_text()
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry))
    return found


def serving_pids(proc: subprocess.Popen[bytes]) -> list[int]:
    """The processes that serve: the workers of a `--workers N` supervisor, else itself
    (taskset execs, so its pid is the server's)."""
    kids = children(proc.pid)
    return kids or [proc.pid]


def cpu_seconds(pid: int) -> float:
    with contextlib.suppress(OSError):
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / CLK_TCK  # utime + stime
    return 0.0


def rss_mib(pid: int) -> float:
    with contextlib.suppress(OSError), open(f"/proc/{pid}/status") as f:
        for ln in f:
            if ln.startswith("VmRSS:"):
                return int(ln.split()[1]) / 1024
    return float("nan")


def wrk_script() -> str:
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as lua:
        lua.write('wrk.method = "POST"\nwrk.body = ' + json.dumps(BODY) + "\n" + "\n".join(
            f"wrk.headers[{json.dumps(k)}] = {json.dumps(v)}" for k, v in HEADERS.items()) + "\n")
    return lua.name


def run_wrk(url: str, script: str, conns: int, duration: float, threads: int = 1,
            cpus: str | None = None, watch: dict[str, list[int]] | None = None) -> dict[str, float | int | str]:
    """One wrk run: req/s, p50/p99 ms, non-2xx, and the CPU wrk and each group of `watch`
    pids used during it, as cores busy (CPU seconds / wall seconds): `wrk_cores`,
    `<group>_cores`."""
    argv = ["wrk", f"-t{threads}", f"-c{conns}", f"-d{duration:g}s", "--latency", "-s", script, url]
    if cpus is not None:
        argv = ["taskset", "-c", cpus, *argv]
    groups = watch or {}
    before = {g: {p: cpu_seconds(p) for p in pids} for g, pids in groups.items()}
    t0 = time.monotonic()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _pid, status, usage = os.wait4(proc.pid, 0)
    wall = time.monotonic() - t0
    out = proc.stdout.read() if proc.stdout else ""
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise RuntimeError(f"wrk failed ({proc.returncode}): {out} {proc.stderr.read() if proc.stderr else ''}")
    used = {g: sum(cpu_seconds(p) - t for p, t in b.items()) for g, b in before.items()}
    m = re.search(r"Requests/sec:\s+([\d.]+)", out)
    if m is None:
        raise RuntimeError(f"wrk printed no rate:\n{out}")
    lat = {}
    for p in ("50", "99"):
        lm = re.search(rf"^\s+{p}%\s+([\d.]+)(us|ms|s)\s*$", out, re.M)
        lat[p] = float(lm.group(1)) * _UNIT[lm.group(2)] if lm else float("nan")
    bad = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", out)
    errs = re.search(r"Socket errors:.*", out)
    return {"rps": float(m.group(1)), "p50_ms": lat["50"], "p99_ms": lat["99"],
            "non2xx": int(bad.group(1)) if bad else 0, "socket_errors": errs.group(0) if errs else "",
            "wrk_cores": (usage.ru_utime + usage.ru_stime) / wall, **{f"{g}_cores": u / wall for g, u in used.items()}}


def nginx_binary() -> str | None:
    return shutil.which("nginx") or next((p for p in ("/usr/sbin/nginx",) if os.path.exists(p)), None)


class Nginx:
    """Debian's nginx running deploy/nginx/nimblemcp.conf, upstreams rewritten to the given
    loopback ports. `extra` server blocks may be appended (e.g. a single-instance pool)."""

    def __init__(self, ports: list[int], listen: int, extra: str = "", workers: int = 1) -> None:
        binary = nginx_binary()
        if binary is None:
            raise RuntimeError("nginx is not installed (apt-get install -y nginx-light)")
        self.dir = Path(tempfile.mkdtemp(prefix="nimblemcp-bench-nginx-"))
        site = NGINX_CONF.read_text()
        for i in range(1, 4):  # the kit lists mcp1..mcp3; fewer ports: drop the rest
            pattern = rf"^\s*server mcp{i}:8000[^\n]*\n"
            if i <= len(ports):
                site = site.replace(f"server mcp{i}:8000", f"server 127.0.0.1:{ports[i - 1]}")
            else:
                site = re.sub(pattern, "", site, flags=re.M)
        site = site.replace("listen 80;", f"listen 127.0.0.1:{listen};") + extra
        (self.dir / "nimblemcp.conf").write_text(site)
        temp = "\n".join(f"  {k}_temp_path {self.dir}/{k};" for k in ("client_body", "proxy", "fastcgi",
                                                                       "uwsgi", "scgi"))
        main = self.dir / "nginx.conf"
        main.write_text(("user root;\n" if os.getuid() == 0 else "")
                        + f"worker_processes {workers};\npid {self.dir}/nginx.pid;\n"
                        f"error_log {self.dir}/error.log warn;\n"
                        "events { worker_connections 4096; }\n"
                        f"http {{\n  access_log off;\n{temp}\n  include {self.dir}/nimblemcp.conf;\n}}\n")
        check = subprocess.run([binary, "-t", "-p", str(self.dir), "-c", str(main)], capture_output=True, text=True)
        if check.returncode != 0:
            raise RuntimeError(check.stderr)
        self.proc = subprocess.Popen([binary, "-p", str(self.dir), "-c", str(main), "-g", "daemon off;"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_port(listen, self.proc, "nginx")

    def pids(self) -> list[int]:
        return [self.proc.pid, *children(self.proc.pid)]

    def close(self) -> None:
        stop(self.proc)
        shutil.rmtree(self.dir, ignore_errors=True)


def load() -> str:
    return "load average " + ", ".join(f"{x:.2f}" for x in os.getloadavg()) + f" ({os.cpu_count()} cores)"


# -- the wrk benchmarks' common set-up -------------------------------------------------


def wrk_options(ap: argparse.ArgumentParser) -> None:
    """The options every wrk benchmark takes."""
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--duration", type=float, default=4, help="seconds of wrk per run")
    ap.add_argument("--connections", type=int, default=64)
    ap.add_argument("--threads", type=int, default=1, help="wrk threads")


class WrkBench:
    """A wrk benchmark of `nimblemcp run` instances, as a context manager: checks that
    wrk and the instances' interpreter are there, notes the load average, starts a
    Redis, and gives `env` (that Redis and a fresh state key, what every instance of a
    deployment shares) and `script` (wrk's Lua for the fixed tools/call). Leaving it
    stops Redis and removes the script."""

    def __init__(self, env: dict[str, str] | None = None) -> None:
        if shutil.which("wrk") is None:
            sys.exit("wrk not found: apt-get update && apt-get install -y wrk")
        if not Path(NIMBLE_PY).exists():
            ensure_peers()
        self.extra = env or {}
        self.load_before = load()
        self.env: dict[str, str] = {}
        self.script = ""
        self.redis: Redis | None = None

    def __enter__(self) -> WrkBench:
        self.redis = Redis()
        self.env = {"NIMBLEMCP_STATE_KEYS": state_key(), "NIMBLEMCP_REDIS_URL": self.redis.url, **self.extra}
        self.script = wrk_script()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self.redis is not None:
            self.redis.close()
        if self.script:
            os.unlink(self.script)

    def warm(self, url: str, args: argparse.Namespace, cpus: str | None = None) -> None:
        """A one-second run, not counted (and upstream keep-alive opened); refuses a
        set-up that answers anything but 2xx."""
        warm = run_wrk(url, self.script, args.connections, 1, args.threads, cpus=cpus)
        if warm["non2xx"]:
            raise RuntimeError(f"{url}: {warm['non2xx']} non-2xx answers; see {LOGS}/bench-*.log")

    def run(self, url: str, args: argparse.Namespace, cpus: str | None = None,
            watch: dict[str, list[int]] | None = None) -> dict[str, float | int | str]:
        """One counted run with the benchmark's options."""
        return run_wrk(url, self.script, args.connections, args.duration, args.threads, cpus=cpus, watch=watch)


def rotations(names: Sequence[str], rounds: int) -> Iterator[str]:
    """Interleaved rounds: each round visits every name, starting one further along."""
    for r in range(rounds):
        k = r % len(names)
        yield from [*names[k:], *names[:k]]


def summarize(runs: dict[str, list[dict[str, Any]]], keys: Sequence[str]) -> dict[str, dict[str, Any]]:
    """Per setup: the median of each of `keys`, the non-2xx answers of all runs, and the runs."""
    summary: dict[str, dict[str, Any]] = {}
    for name, rs in runs.items():
        summary[name] = {k: median([float(x[k]) for x in rs]) for k in keys}
        summary[name]["non2xx"] = sum(int(x["non2xx"]) for x in rs)
        summary[name]["runs"] = rs
    return summary
