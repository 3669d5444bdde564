"""Issue 12, part A: the docs example confines every entry point, survives odd files,
and never tells a client a server path or an OS message (a real stdio process)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.test_examples import DOCS_SERVER, META, _read_until


def _folder(tmp_path: Path) -> tuple[Path, Path]:
    docs = tmp_path / "docs"
    docs.mkdir()
    for doc in (DOCS_SERVER.parent / "docs").glob("*.md"):
        shutil.copy(doc, docs / doc.name)
    outside = tmp_path / "private"
    outside.mkdir()
    (outside / "secret.md").write_text("TOPSECRET password=hunter2\n", encoding="utf-8")
    (docs / "secret.md").symlink_to(outside / "secret.md")  # points outside
    (docs / "gone.md").symlink_to(tmp_path / "nowhere.md")  # broken
    (docs / "alias.md").symlink_to(docs / "brief.md")  # inside: fine
    (docs / "latin1.md").write_bytes("caf\xe9 harbor notes\n".encode("latin-1"))  # not UTF-8
    return docs, outside


class Stdio:
    def __init__(self, docs: Path) -> None:
        env = {**os.environ, "DOCS_DIR": str(docs), "DOCS_POLL_SECONDS": "0.1"}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "nimblemcp", "run", str(DOCS_SERVER)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env,
        )
        self.ids = 0

    def request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        self.ids += 1
        rid = self.ids
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps({"jsonrpc": "2.0", "id": rid, "method": method,
                                          "params": {**params, "_meta": META}}) + "\n")
        self.proc.stdin.flush()
        return _read_until(self.proc, lambda m: m.get("id") == rid)

    def call(self, tool: str, /, **arguments: Any) -> dict[str, Any]:
        result: dict[str, Any] = self.request("tools/call", {"name": tool, "arguments": arguments})["result"]
        return result

    def close(self) -> None:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=10)
        self.proc.stdout.close()


def _no_leak(text: str, *paths: Path) -> None:
    for p in paths:
        assert str(p) not in text
    for os_text in ("Errno", "File name too long", "No such file", "Permission denied", "Traceback"):
        assert os_text not in text
    assert "hunter2" not in text and "TOPSECRET" not in text


def test_every_entry_point_is_confined_and_odd_files_break_nothing(tmp_path: Path) -> None:
    docs, outside = _folder(tmp_path)
    peer = Stdio(docs)
    try:
        names = peer.call("list_docs")["structuredContent"]["result"]
        assert "secret.md" not in names and "gone.md" not in names
        assert {"alias.md", "brief.md", "latin1.md"} <= set(names)

        for name in ("secret.md", "gone.md", "x" * 300 + ".md", "y" * 300):
            refused = peer.call("read_doc", name=name)
            assert refused["isError"] is True
            _no_leak(json.dumps(refused), docs, outside, tmp_path)

        assert "Harbor" in peer.call("read_doc", name="alias.md")["content"][0]["text"]
        assert "caf\ufffd" in peer.call("read_doc", name="latin1.md")["content"][0]["text"]

        hits = peer.call("search_docs", query="harbor")["structuredContent"]["result"]
        assert any(h.startswith("latin1.md:") for h in hits)  # one odd file breaks no search
        secret_hits = peer.call("search_docs", query="TOPSECRET")
        assert secret_hits["structuredContent"]["result"] == []

        uris = {r["uri"] for r in peer.request("resources/list", {})["result"]["resources"]}
        assert "docs://secret.md" not in uris and "docs://gone.md" not in uris
        for uri in ("docs://secret.md", "docs://gone.md", "docs://" + "z" * 300 + ".md"):
            answer = peer.request("resources/read", {"uri": uri})
            assert "error" in answer
            _no_leak(json.dumps(answer), docs, outside, tmp_path)

        started = peer.call("start_review", document="secret.md")
        assert started["isError"] is True
        _no_leak(json.dumps(started), docs, outside, tmp_path)

        # The watcher lived through the broken link: a new document still appears...
        (docs / "later.md").write_text("# later\n", encoding="utf-8")
        # ...and a link pointing outside, added later, never does.
        (docs / "sneaky.md").symlink_to(outside / "secret.md")
        import time

        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            uris = {r["uri"] for r in peer.request("resources/list", {})["result"]["resources"]}
            if "docs://later.md" in uris:
                break
            time.sleep(0.1)
        assert "docs://later.md" in uris and "docs://sneaky.md" not in uris
        sneaky = peer.request("resources/read", {"uri": "docs://sneaky.md"})
        assert "error" in sneaky
        _no_leak(json.dumps(sneaky), docs, outside, tmp_path)
    finally:
        peer.close()
