"""`nimblemcp install HOST server.py` (issue 14) as a real subprocess against a temporary
HOME, for every host and both platforms' config locations; the written command is then
spawned and answers `server/discover`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from nimblemcp import Client
from nimblemcp.transports.stdio.client import StdioTransport

SERVER = '''
import os
import nimblemcp as m

server = m.Server("weather-station")

@server.tool
def setting(key: str) -> str:
    """The server's environment variable KEY."""
    return os.environ.get(key, "<unset>")
'''

# (host, platform) -> the config file under HOME, and the key holding the servers
LOCATIONS = {
    ("claude-desktop", "linux"): (".config/Claude/claude_desktop_config.json", "mcpServers"),
    ("claude-desktop", "macos"): ("Library/Application Support/Claude/claude_desktop_config.json",
                                  "mcpServers"),
    ("claude-code", "linux"): (".claude.json", "mcpServers"),
    ("claude-code", "macos"): (".claude.json", "mcpServers"),
    ("cursor", "linux"): (".cursor/mcp.json", "mcpServers"),
    ("cursor", "macos"): (".cursor/mcp.json", "mcpServers"),
    ("vscode", "linux"): (".config/Code/User/mcp.json", "servers"),
    ("vscode", "macos"): ("Library/Application Support/Code/User/mcp.json", "servers"),
}


@pytest.fixture
def home(tmp_path: Path) -> Path:
    home = tmp_path / "home"
    home.mkdir()
    return home


@pytest.fixture
def server_file(tmp_path: Path) -> Path:
    path = tmp_path / "project" / "station.py"
    path.parent.mkdir()
    path.write_text(SERVER)
    return path


def install(home: Path, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "XDG_CONFIG_HOME"}
    env["HOME"] = str(home)
    return subprocess.run([sys.executable, "-m", "nimblemcp", "install", *args], env=env,
                          capture_output=True, text=True, timeout=60, cwd=cwd)


@pytest.mark.parametrize(("host", "platform"), sorted(LOCATIONS))
def test_each_host_and_platform_writes_its_own_file(home: Path, server_file: Path, host: str,
                                                   platform: str) -> None:
    relative, key = LOCATIONS[(host, platform)]
    config = home / relative
    config.parent.mkdir(parents=True, exist_ok=True)
    # Something already there must survive: another server and unrelated settings.
    config.write_text(json.dumps({"theme": "dark", key: {"other": {"command": "other-server"}}}))
    shown = install(home, host, str(server_file), "--platform", platform, cwd=server_file.parent)
    assert shown.returncode == 0, shown.stderr
    assert "+++" in shown.stdout and '"weather-station"' in shown.stdout
    assert "--write" in shown.stderr
    assert json.loads(config.read_text())[key] == {"other": {"command": "other-server"}}

    done = install(home, host, "station.py", "--platform", platform, "--write",
                   cwd=server_file.parent)
    assert done.returncode == 0, done.stderr
    written = json.loads(config.read_text())
    assert written["theme"] == "dark"
    assert written[key]["other"] == {"command": "other-server"}
    entry = written[key]["weather-station"]
    assert entry["command"] == os.path.abspath(sys.executable)
    assert Path(entry["command"]).is_absolute()
    assert entry["args"] == ["-m", "nimblemcp", "run", str(server_file.resolve())]
    assert "env" not in entry
    if host in ("vscode", "claude-code"):
        assert entry["type"] == "stdio"
    else:
        assert "type" not in entry
    others = [p for p in home.rglob("*") if p.is_file() and p != config]
    assert others == [], f"wrote elsewhere too: {others}"


def test_generic_needs_config_and_refuses_to_clobber(home: Path, server_file: Path,
                                                    tmp_path: Path) -> None:
    mcp_json = tmp_path / "mcp.json"
    missing = install(home, "generic", str(server_file))
    assert missing.returncode == 1 and "--config" in missing.stderr
    first = install(home, "generic", str(server_file), "--config", str(mcp_json), "--write",
                    "--name", "station")
    assert first.returncode == 0, first.stderr
    before = mcp_json.read_text()
    again = install(home, "generic", str(server_file), "--config", str(mcp_json), "--write",
                    "--name", "station", "--env", "A=1")
    assert again.returncode == 1 and "--force" in again.stderr and "Traceback" not in again.stderr
    assert mcp_json.read_text() == before
    same = install(home, "generic", str(server_file), "--config", str(mcp_json), "--write",
                   "--name", "station")
    assert same.returncode == 0 and "already installed" in same.stderr
    forced = install(home, "generic", str(server_file), "--config", str(mcp_json), "--write",
                     "--name", "station", "--env", "A=1", "--force")
    assert forced.returncode == 0, forced.stderr
    assert '+        "A": "1"' in forced.stdout
    assert json.loads(mcp_json.read_text())["mcpServers"]["station"]["env"] == {"A": "1"}


def test_a_config_that_is_not_plain_json_is_left_alone(home: Path, server_file: Path) -> None:
    config = home / ".cursor" / "mcp.json"
    config.parent.mkdir()
    config.write_text('{\n  // my servers\n  "mcpServers": {}\n}\n')
    out = install(home, "cursor", str(server_file), "--write")
    assert out.returncode == 1 and "by hand" in out.stderr and '"weather-station"' in out.stderr
    assert "// my servers" in config.read_text()


def test_a_server_that_cannot_be_loaded_is_refused(home: Path, tmp_path: Path, server_file: Path) -> None:
    """Issue 33: the host would fail to start it; nothing is written, status 1."""
    broken = tmp_path / "broken_one.py"
    broken.write_text("raise RuntimeError('needs a database')\n")
    out = install(home, "cursor", str(broken), "--write")
    assert out.returncode == 1
    assert "cannot load" in out.stderr and "RuntimeError: needs a database" in out.stderr
    assert "--no-check" in out.stderr
    assert not (home / ".cursor" / "mcp.json").exists()
    missing = install(home, "cursor", f"{server_file}:nope", "--write")
    assert missing.returncode == 1 and "has no attribute 'nope'" in missing.stderr
    assert not (home / ".cursor" / "mcp.json").exists()
    syntax = tmp_path / "typo.py"
    syntax.write_text("import nimblemcp as m\nserver = m.Server('typo'\n")
    bad = install(home, "cursor", str(syntax), "--write")
    assert bad.returncode == 1 and "SyntaxError" in bad.stderr


def test_no_check_writes_it_anyway_under_the_file_stem(home: Path, tmp_path: Path) -> None:
    broken = tmp_path / "broken_one.py"
    broken.write_text("raise RuntimeError('needs a database')\n")
    out = install(home, "cursor", str(broken), "--write", "--no-check")
    assert out.returncode == 0, out.stderr
    assert "broken_one" in json.loads((home / ".cursor" / "mcp.json").read_text())["mcpServers"]


def test_the_server_is_loaded_with_the_entrys_environment(home: Path, tmp_path: Path) -> None:
    needy = tmp_path / "needy.py"
    needy.write_text("import os\nimport nimblemcp as m\n"
                     "server = m.Server(os.environ['DB_URL'].rsplit('/', 1)[1])\n")
    out = install(home, "cursor", str(needy), "--env", "DB_URL=postgres://db/ledger", "--write")
    assert out.returncode == 0, out.stderr
    entry = json.loads((home / ".cursor" / "mcp.json").read_text())["mcpServers"]["ledger"]
    assert entry["env"] == {"DB_URL": "postgres://db/ledger"}


async def test_the_written_command_starts_the_server_with_its_env(home: Path, server_file: Path,
                                                                  tmp_path: Path) -> None:
    env_file = tmp_path / "station.env"
    env_file.write_text("# secrets\nexport API_KEY='s3cret'\nREGION=eu\n")
    out = install(home, "claude-desktop", str(server_file), "--platform", "linux",
                  "--env-file", str(env_file), "--env", "REGION=us", "--write")
    assert out.returncode == 0, out.stderr
    config = json.loads((home / ".config/Claude/claude_desktop_config.json").read_text())
    entry = config["mcpServers"]["weather-station"]
    assert entry["env"] == {"API_KEY": "s3cret", "REGION": "us"}
    # As a host would: the command and args alone, with the entry's env, from elsewhere.
    transport = StdioTransport(entry["command"], entry["args"], env=entry["env"], cwd=str(home))
    async with Client(transport) as client:
        found = await client.discover()
        assert found["_meta"]["io.modelcontextprotocol/serverInfo"]["name"] == "weather-station"
        result = await client.call_tool("setting", {"key": "API_KEY"})
        assert result["content"][0]["text"] == "s3cret"


def test_linux_hosts_follow_xdg_config_home(home: Path, server_file: Path, tmp_path: Path) -> None:
    xdg = tmp_path / "xdg"
    env = {**os.environ, "HOME": str(home), "XDG_CONFIG_HOME": str(xdg)}
    for host, relative in (("claude-desktop", "Claude/claude_desktop_config.json"),
                           ("vscode", "Code/User/mcp.json")):
        out = subprocess.run([sys.executable, "-m", "nimblemcp", "install", host, str(server_file),
                              "--platform", "linux", "--write"], env=env, capture_output=True,
                             text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        assert (xdg / relative).is_file()
    assert not (home / ".config").exists()
