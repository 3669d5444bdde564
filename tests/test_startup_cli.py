"""`nimblemcp run` spawns without shutil or pathlib, and the command's words are
unchanged.

The parsers lay help out without shutil and `run` builds only its own parser
(`nimblemcp.cli._parsers`); the server file is located without pathlib. Every help text, usage and error is compared with
what stock argparse prints for the same parser (HelpFormatter, full parser), at
several widths and with the width read from a real terminal.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from nimblemcp.cli import _exists, _pure_path, _stem
from nimblemcp.cli._parsers import full_parser, parse

# Every command's help, and errors that end in the run parser, the full parser or both.
CASES: list[list[str]] = [
    [], ["-h"], ["--help"],
    *([cmd, "--help"] for cmd in ("run", "keys", "proxy", "dev", "install", "discover", "tools",
                                  "call", "read", "prompt", "listen")),
    ["run", "-h"], ["run", "x.py", "--help"], ["run"], ["run", "--transport"],
    ["run", "x.py", "--transport", "foo"], ["run", "--port", "abc", "x.py"],
    ["run", "x.py", "--bogus"], ["run", "x.py", "extra"], ["run", "x.py", "--workers", "two"],
    ["run", "--log-level", "loud", "x.py"], ["keys"], ["keys", "old"], ["bogus"], ["proxy"],
    ["proxy", "--mode", "odd", "http://x"], ["--bogus"],
]

DRIVER = textwrap.dedent("""
    import argparse, contextlib, io, json, os, sys

    import nimblemcp.cli as cli
    import nimblemcp.cli._parsers as parsers

    if sys.argv[1] == "stock":  # argparse's own layout (shutil) and the full parser every time
        parsers._Formatter = argparse.HelpFormatter
        parsers.parse = lambda argv: parsers.full_parser().parse_args(argv)
    cases = json.loads(sys.argv[3])
    results = []
    for width in (None, "40", "80", "123"):
        if width is None:
            os.environ.pop("COLUMNS", None)
        else:
            os.environ["COLUMNS"] = width
        for argv in cases:
            out, err, code = io.StringIO(), io.StringIO(), 0
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                try:
                    cli.main(argv)
                except SystemExit as exc:
                    code = exc.code
            results.append([width, argv, out.getvalue(), err.getvalue(), code])
    with open(sys.argv[2], "w") as f:
        json.dump(results, f)
""")


def _words(variant: str, tmp_path: Path) -> list[list[object]]:
    """What every case prints, `variant` "ours" or "stock"; stdout is a terminal 97
    columns wide (where supported), so that an unset COLUMNS reads the terminal."""
    out = tmp_path / f"{variant}.json"
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    argv = [sys.executable, "-c", DRIVER, variant, str(out), json.dumps(CASES)]
    if os.name == "posix":
        import fcntl
        import pty
        import struct
        import termios

        master, slave = pty.openpty()
        try:
            fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 30, 97, 0, 0))
            subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=slave, stderr=subprocess.PIPE,
                           env=env, check=True, timeout=120)
        finally:
            os.close(slave)
            os.close(master)
    else:
        subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, env=env, check=True, timeout=120)
    result: list[list[object]] = json.loads(out.read_text())
    return result


def test_help_usage_and_errors_are_argparse_s_own(tmp_path: Path) -> None:
    ours, stock = _words("ours", tmp_path), _words("stock", tmp_path)
    assert len(ours) == len(stock) == 4 * len(CASES)
    for mine, theirs in zip(ours, stock, strict=True):
        assert mine == theirs, (mine[:2], mine[2:], theirs[2:])
    by_case = {(str(w), tuple(a)): (o, e, c) for w, a, o, e, c in ours}  # type: ignore[misc]
    run_help = {w: by_case[(w, ("run", "--help"))] for w in ("None", "40", "80", "123")}
    assert all(code == 0 and text.startswith("usage: nimblemcp run") for text, _, code in run_help.values())
    assert len({text for text, _, _ in run_help.values()}) == 4  # each width lays it out anew
    if os.name == "posix":  # the terminal's 97 columns, not the 80 of no terminal
        assert max(len(line) for line in str(run_help["None"][0]).splitlines()) > 80
    unknown = by_case[("80", ("run", "x.py", "--bogus"))]
    assert unknown[2] == 2 and "usage: nimblemcp [-h]" in str(unknown[1])  # the full parser's usage
    assert "unrecognized arguments: --bogus" in str(unknown[1])


@pytest.mark.parametrize("argv", [
    ["run", "x.py"], ["run", "x.py", "--transport", "http", "--port", "9001"],
    ["run", "--trans", "stdio", "x.py"], ["run", "x.py", "--no-proxy-headers", "--legacy-sse"],
    ["run", "--", "-x.py"], ["run", "pkg.mod:make", "--allowed-hosts", "a,b", "--max-body", "10"],
    ["keys", "new"], ["proxy", "--transport", "stdio", "--", "python", "srv.py"],
])
def test_parsed_namespace_is_the_full_parsers(argv: list[str]) -> None:
    assert vars(parse(argv)) == vars(full_parser().parse_args(argv))
    assert list(vars(parse(argv))) == list(vars(full_parser().parse_args(argv)))

@pytest.mark.parametrize("text", [
    "", ".", "./", "x.py", "./x.py", "a//b.py", "/a/b.py", "//a/b", "///a/b", "a/./b.py", "a/../b.py",
    "x.py/", "a/.hidden", "a/b.", "..", "a/..", "/", "//", "///", "x.tar.py", "a/b/", ".py", "dir/./",
    "/tmp", "/tmp/", "/nonexistent/x.py", "nul\x00.py", "srv.py", "./srv.py/", "sub//srv.py", "link.py",
])
@pytest.mark.skipif(os.name != "posix", reason="POSIX rules; elsewhere pathlib itself answers")
def test_server_file_located_as_pathlib_would(text: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "srv.py").write_text("")
    (tmp_path / "sub" / "srv.py").write_text("")
    (tmp_path / "link.py").symlink_to(tmp_path / "sub" / "srv.py")
    monkeypatch.chdir(tmp_path)
    path = pathlib.Path(text)
    assert _pure_path(text) == str(path)
    assert _exists(_pure_path(text)) == path.exists()
    assert _stem(_pure_path(text)) == path.stem
    if path.exists():
        assert os.path.dirname(os.path.realpath(_pure_path(text))) == str(path.resolve().parent)


SERVER = textwrap.dedent("""
    import atexit, json, sys

    from nimblemcp import Server

    server = Server("startup-cli", "1.0.0")

    @server.tool
    def echo(text: str) -> str:
        return text

    def report() -> None:
        print(json.dumps([__file__, sorted(sys.modules)]), file=sys.stderr, flush=True)

    atexit.register(report)
""")

DISCOVER = {"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": {"_meta": {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "1"},
    "io.modelcontextprotocol/clientCapabilities": {}}}}


@pytest.mark.parametrize("target", ["srv.py", "./srv.py", "srv.py:server"])
def test_run_spawn_imports_neither_shutil_nor_pathlib(tmp_path: Path, target: str) -> None:
    """`nimblemcp run TARGET` answers `server/discover` without shutil or pathlib; the
    module is the file named."""
    (tmp_path / "srv.py").write_text(SERVER)
    proc = subprocess.run([sys.executable, "-m", "nimblemcp", "run", target], input=json.dumps(DISCOVER) + "\n",
                          capture_output=True, text=True, cwd=tmp_path, timeout=60, check=True)
    answer = json.loads(proc.stdout.splitlines()[0])
    assert answer["result"]["_meta"]["io.modelcontextprotocol/serverInfo"]["name"] == "startup-cli"
    file, mods = json.loads(proc.stderr.strip().splitlines()[-1])
    assert os.path.isabs(file) and os.path.samefile(file, tmp_path / "srv.py")
    assert {"shutil", "pathlib", "bz2", "lzma", "fnmatch"} & set(mods) == set()


def test_run_with_options_still_parses(tmp_path: Path) -> None:
    (tmp_path / "srv.py").write_text(SERVER)
    proc = subprocess.run([sys.executable, "-m", "nimblemcp", "run", "--transport", "stdio", "srv.py"],
                          input=json.dumps(DISCOVER) + "\n", capture_output=True, text=True, cwd=tmp_path,
                          timeout=60, check=True)
    assert json.loads(proc.stdout.splitlines()[0])["id"] == 1
    _, mods = json.loads(proc.stderr.strip().splitlines()[-1])
    assert "argparse" in mods and {"shutil", "pathlib"} & set(mods) == set()
