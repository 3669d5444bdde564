"""Smoke test for examples/host_agent (issue 16): the terminal agent with its rule-based
stand-in model, the docs server over stdio and the notes server over HTTP (started by
the agent), asking the user before the destructive `delete_note`."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
AGENT = ROOT / "examples" / "host_agent" / "agent.py"


def test_host_agent_routes_to_both_servers_and_asks_before_deleting() -> None:
    script = "\n".join([
        "list docs", "search Dana", "note: buy milk", "delete note 1", "n", "notes",
        "delete note 1", "y", "notes", "hello", "quit",
    ]) + "\n"
    done = subprocess.run([sys.executable, str(AGENT)], input=script, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "[docs] connected" in out and "[notes] connected" in out
    assert "docs__read_doc" in out and "notes__delete_note" in out
    assert "brief.md" in out and "glossary.md" in out
    assert "brief.md:" in out and "Dana" in out  # search_docs hit
    asks = out.count("[notes] wants to run delete_note")
    assert asks == 2  # asked both times, and only for the destructive tool
    assert "Not run: the user declined." in out
    assert out.index('{"result":["1: buy milk"]}') < out.index("Deleted note 1.")
    assert '{"result":[]}' in out
    assert "rule-based stand-in, not a model" in out
