"""Run every benchmark in turn and write benchmarks/results/*.md|json.

    python benchmarks/run_all.py            # full run (~5 minutes on the 2-core box)
    python benchmarks/run_all.py --quick    # smoke run (~1 minute)
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
    ]
    for step in steps:
        print(f"\n### {step[0]}", flush=True)
        subprocess.run([sys.executable, str(HERE / step[0]), *step[1:]], check=True, cwd=HERE)


if __name__ == "__main__":
    main()
