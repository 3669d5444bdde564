"""Run every benchmark in turn and write benchmarks/results/*.md|json.

    python benchmarks/run_all.py            # full run (~10 minutes on the 2-core box)
    python benchmarks/run_all.py --quick    # smoke run (~2 minutes)

nginx_pool.py needs nginx (apt-get install -y nginx-light); the multi-instance scripts need
redis-server; wrk drives the HTTP ones.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main() -> None:
    quick = "--quick" in sys.argv
    subprocess.run(["bash", str(HERE / "_peers.sh")], check=True)
    steps = [
        ["cold_start.py", "--rounds", "5" if quick else "20"],
        ["stdio_roundtrip.py", "--calls", "500" if quick else "3000",
         "--rounds", "5" if quick else "10"],
        ["client_roundtrip.py", "--calls", "300" if quick else "2000",
         "--rounds", "1" if quick else "5"],
        ["http_throughput.py", "--rounds", "1" if quick else "5",
         "--duration", "3" if quick else "4"],
        # several processes (issues 13 and 18): Redis, nginx, `nimblemcp run --workers`
        ["workers.py", "--rounds", "1" if quick else "5", "--duration", "2" if quick else "4"],
        ["nginx_pool.py", "--rounds", "1" if quick else "5", "--duration", "2" if quick else "4"],
        ["listen_fanout.py", "--quick"] if quick else ["listen_fanout.py"],
        ["listen_fanout.py", "--quick", "--rate", "100", "--name", "listen_fanout_paced"] if quick
        else ["listen_fanout.py", "--events", "1000", "--rate", "100", "--name", "listen_fanout_paced"],
        ["chart.py"],  # benchmarks/chart.png from the results above
    ]
    for step in steps:
        print(f"\n### {step[0]}", flush=True)
        subprocess.run([sys.executable, str(HERE / step[0]), *step[1:]], check=True, cwd=HERE)


if __name__ == "__main__":
    main()
