"""`nimblemcp discover|tools|call|read|prompt|listen` as a real subprocess against the
docs example, over stdio (`-- command`) and over HTTP (a uvicorn subprocess)."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "examples" / "docs_server"
STDIO = ["--", sys.executable, "-m", "nimblemcp", "run", str(DOCS / "server.py")]


def cli(*args: str, stdin: str = "", env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "nimblemcp", *args], input=stdin, capture_output=True,
                          text=True, timeout=60, env={**os.environ, "DOCS_WATCH": "0", **(env or {})})


@pytest.fixture
def docs_copy(tmp_path: Path) -> Path:
    target = tmp_path / "docs"
    shutil.copytree(DOCS / "docs", target)
    return target


def test_tools_table_and_json_over_stdio() -> None:
    table = cli("tools", *STDIO)
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    assert lines[0].split() == ["NAME", "DESCRIPTION"]
    assert any(line.startswith("search_docs ") and "mention a term" in line for line in lines)
    listed = json.loads(cli("tools", "--json", *STDIO).stdout)
    assert {"list_docs", "read_doc", "search_docs"} <= {t["name"] for t in listed}


def test_call_arguments_read_prompt_discover_over_stdio() -> None:
    hit = cli("call", "search_docs", "--arg", "query=risk", "--json", *STDIO)
    assert hit.returncode == 0, hit.stderr
    assert any(line.startswith("risks.md:") for line in json.loads(hit.stdout)["structuredContent"]["result"])
    text = cli("call", "read_doc", "--args", '{"name": "brief.md"}', *STDIO)
    assert text.returncode == 0 and "Project brief" in text.stdout
    bad = cli("call", "read_doc", "--arg", "name=nope.md", *STDIO)  # a tool error: isError
    assert bad.returncode == 1 and "No document named" in bad.stderr
    read = cli("read", "docs://brief.md", *STDIO)
    assert read.returncode == 0 and read.stdout.startswith("# Project brief")
    resources = cli("read", *STDIO)
    assert "docs://brief.md" in resources.stdout and resources.stdout.startswith("URI")
    prompt = cli("prompt", "review_brief", *STDIO)
    assert prompt.returncode == 0 and "--- user" in prompt.stdout and "risks" in prompt.stdout
    found = json.loads(cli("discover", "--json", *STDIO).stdout)
    assert "2026-07-28" in found["supportedVersions"]
    missing = cli("read", "docs://absent.md", *STDIO)
    assert missing.returncode == 1 and "nimblemcp:" in missing.stderr


def test_usage_errors_are_clear() -> None:
    no_target = cli("tools")
    assert no_target.returncode == 2 and "http(s):// URL" in no_target.stderr
    bad_arg = cli("call", "search_docs", "--arg", "query", *STDIO)
    assert bad_arg.returncode == 2 and "KEY=VALUE" in bad_arg.stderr


def test_run_does_not_import_the_client(tmp_path: Path) -> None:
    """`nimblemcp run` stays off the client path (cold start)."""
    (tmp_path / "probe.py").write_text(
        "import sys\nimport nimblemcp as m\nserver = m.Server('probe')\n"
        "@server.tool\ndef loaded() -> str:\n"
        "    return ','.join(sorted(n for n in sys.modules if n.startswith('nimblemcp.client')))\n"
    )
    out = cli("call", "loaded", "--json", "--", sys.executable, "-m", "nimblemcp", "run",
              str(tmp_path / "probe.py"))
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["content"][0]["text"] == ""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def http_docs(tmp_path: Path, docs_copy: Path) -> Iterator[tuple[str, Path]]:
    port = _free_port()
    reviews = tmp_path / "reviews"
    env = {**os.environ, "DOCS_DIR": str(docs_copy), "REVIEWS_DIR": str(reviews), "DOCS_WATCH": "0"}
    proc = subprocess.Popen([sys.executable, "-m", "nimblemcp", "run", str(DOCS / "server.py"),
                             "--transport", "http", "--port", str(port)],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                assert time.monotonic() < deadline and proc.poll() is None, "server did not start"
                time.sleep(0.05)
        yield f"http://127.0.0.1:{port}/mcp", reviews
    finally:
        proc.terminate()
        proc.wait(timeout=20)


def test_http_discover_and_elicitation_in_the_terminal(http_docs: tuple[str, Path]) -> None:
    """`call` answers an elicitation with input() per field; Enter keeps the default."""
    url, reviews = http_docs
    shown = cli("discover", url)
    assert shown.returncode == 0 and shown.stdout.startswith("Project documents")
    handle = json.loads(cli("call", url, "start_review", "--arg", "document=brief.md", "--json").stdout)
    review = handle["content"][0]["text"]
    added = cli("call", url, "add_comment", "--arg", f"review={review}", "--arg", "comment=Add dates")
    assert added.returncode == 0 and "1 comment(s)" in added.stdout
    declined = cli("call", url, "finish_review", "--arg", f"review={review}", stdin="no\n")
    assert declined.returncode == 0, declined.stderr
    assert "Publish 1 comment(s) on brief.md?" in declined.stderr  # the question was shown
    assert "Not published" in declined.stdout
    published = cli("call", url, "finish_review", "--arg", f"review={review}", stdin="\n")
    assert published.returncode == 0, published.stderr
    files = list(reviews.glob("brief-*.md"))
    assert len(files) == 1 and "- Add dates" in files[0].read_text()


async def test_listen_prints_events_until_ctrl_c(docs_copy: Path) -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "nimblemcp", "listen", "--resource", "docs://brief.md", "--resources",
        *STDIO, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "DOCS_DIR": str(docs_copy), "DOCS_POLL_SECONDS": "0.05"},
    )
    assert proc.stdout is not None
    try:
        ack = (await asyncio.wait_for(proc.stdout.readline(), 30)).decode()
        assert ack.startswith("acknowledged ") and "docs://brief.md" in ack
        brief = docs_copy / "brief.md"
        stat = brief.stat()
        brief.write_text(brief.read_text() + "\nEdited.\n")
        os.utime(brief, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
        (docs_copy / "new.md").write_text("# New\n")
        seen: set[str] = set()
        while not {"resource_updated docs://brief.md", "resources_changed"} <= seen:
            seen.add((await asyncio.wait_for(proc.stdout.readline(), 30)).decode().strip())
        proc.send_signal(signal.SIGINT)
        assert await asyncio.wait_for(proc.wait(), 30) == 0
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


CONFORMANCE = ["--", sys.executable, str(ROOT / "examples" / "conformance" / "server.py")]


def test_call_with_tasks_prints_status_changes_over_stdio() -> None:
    """`call --tasks` declares the extension; the task's statuses go to stderr."""
    done = cli("call", "slow_compute", "--tasks", "--arg", "seconds=0.1", *CONFORMANCE)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "Computed result after 0.1 s."
    lines = [line.split(": ", 1)[1] for line in done.stderr.splitlines() if line.startswith("task ")]
    assert lines == ["working", "completed"]
    asked = cli("call", "confirm_delete", "--tasks", *CONFORMANCE, stdin="y\n\n")
    assert asked.returncode == 0, asked.stderr
    assert "Delete file.txt?" in asked.stderr and asked.stdout.endswith("Deleted file.txt.\n")
    assert "input_required" in asked.stderr
    plain = cli("call", "slow_compute", "--arg", "seconds=0", *CONFORMANCE)  # no --tasks: no task
    assert plain.returncode == 0 and "task " not in plain.stderr
    failed = cli("call", "protocol_error_job", "--tasks", *CONFORMANCE)
    assert failed.returncode == 1 and "The job crashed." in failed.stderr
