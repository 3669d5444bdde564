"""The multi-instance benchmark scripts still run (issues 13 and 18): `listen_fanout.py
--quick` starts two real `nimblemcp run --transport http` instances on one real Redis,
opens 20 `subscriptions/listen` streams over raw sockets, publishes a burst of 200
resource-updated events from one instance and prints its table. Nothing here measures
speed (no timing thresholds, ever); it checks that every event reached every listener
subscribed to it and that the table is there. Results go to a temporary folder."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"

pytest.importorskip("httptools")  # the client's parser (uvicorn[standard], in [http])


def test_listen_fanout_quick_runs_and_delivers_every_event(tmp_path: Path) -> None:
    env = {**os.environ, "NIMBLE_PY": sys.executable, "BENCH_RESULTS": str(tmp_path)}
    env.pop("PYTHONPATH", None)
    run = subprocess.run([sys.executable, str(BENCH / "listen_fanout.py"), "--quick"], cwd=BENCH, env=env,
                         capture_output=True, text=True, timeout=180)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "| instance 0 (publishes) |" in run.stdout and "| instance 1 " in run.stdout
    delivered = re.search(r"Delivered (\d+) of (\d+) ", run.stdout)
    assert delivered is not None, run.stdout
    assert delivered.group(1) == delivered.group(2) == "800"  # 200 events x 4 listeners per topic
    assert (tmp_path / "listen_fanout.json").exists()
