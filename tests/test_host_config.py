"""Reading `mcp.json` in the shapes hosts write it (issue 16): Claude Desktop / Claude
Code / Cursor `mcpServers`, VS Code `servers` with `type` (JSONC, `envFile`, `${...}`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nimblemcp.host import ConfigError, ServerConfig, load_config, parse_config
from nimblemcp.host._config import child_environment, strip_jsonc


def test_claude_desktop_shape_stdio_and_remote(tmp_path: Path) -> None:
    path = tmp_path / "claude_desktop_config.json"
    path.write_text(json.dumps({"mcpServers": {
        "docs": {"command": "python", "args": ["server.py", "--x"], "env": {"A": "1"},
                 "cwd": "work"},
        "remote": {"url": "https://example.com/mcp", "headers": {"Authorization": "Bearer t"}},
    }, "globalShortcut": ""}))
    servers = load_config(path)
    assert list(servers) == ["docs", "remote"]
    docs = servers["docs"]
    assert (docs.transport, docs.command, docs.args, dict(docs.env)) == (
        "stdio", "python", ("server.py", "--x"), {"A": "1"})
    assert docs.cwd == str(tmp_path / "work")  # relative to the file
    assert docs.command_line == ["python", "server.py", "--x"]
    remote = servers["remote"]
    assert (remote.transport, remote.url, dict(remote.headers)) == (
        "http", "https://example.com/mcp", {"Authorization": "Bearer t"})


def test_claude_code_types_and_variables() -> None:
    data = {"mcpServers": {
        "api": {"type": "http", "url": "${API_BASE:-https://api.example.com}/mcp",
                "headers": {"Authorization": "Bearer ${API_KEY}"}, "oauth": {"clientId": "abc"}},
        "stream": {"type": "streamable-http", "url": "https://s.example.com/mcp"},
        "legacy": {"type": "sse", "url": "https://old.example.com/sse"},
        "local": {"type": "stdio", "command": "${HOME}/bin/server", "args": ["--root", "${workspaceFolder}"]},
    }}
    servers = parse_config(data, environ={"API_KEY": "k1", "HOME": "/home/u"},
                           variables={"workspaceFolder": "/repo"})
    assert servers["api"].url == "https://api.example.com/mcp"
    assert servers["api"].headers["Authorization"] == "Bearer k1"
    assert servers["api"].oauth == {"clientId": "abc"}
    assert servers["stream"].transport == "http"
    assert servers["legacy"].transport == "sse"
    assert servers["local"].command == "/home/u/bin/server"
    assert servers["local"].args == ("--root", "/repo")
    with pytest.raises(ConfigError, match=r"server 'api'.*\$\{API_KEY\}"):
        parse_config(data, environ={}, variables={"workspaceFolder": "/repo"})


def test_vscode_mcp_json_with_comments_env_file_and_inputs(tmp_path: Path) -> None:
    (tmp_path / ".env").write_text("# secrets\nTOKEN='s3cret'\nexport MODE=dev\n\n")
    path = tmp_path / "mcp.json"
    path.write_text("""{
      // VS Code: .vscode/mcp.json
      "servers": {
        "docs": {
          "type": "stdio",
          "command": "python",
          "args": ["server.py", "https://not-a-comment//x"], /* block comment */
          "envFile": ".env",
          "env": {"MODE": "${env:OVERRIDE}"},
        },
        "web": {"type": "http", "url": "http://localhost:3000/mcp",},
      },
      "inputs": [],
    }""")
    servers = load_config(path, environ={"OVERRIDE": "prod"})
    docs = servers["docs"]
    assert docs.args == ("server.py", "https://not-a-comment//x")
    assert dict(docs.env) == {"TOKEN": "s3cret", "MODE": "prod"}  # env wins over envFile
    assert servers["web"].transport == "http"
    settings = {"mcp": {"servers": {"s": {"command": "x"}}}}  # VS Code settings.json
    assert parse_config(settings)["s"].command == "x"


def test_disabled_and_inferred_types_and_errors(tmp_path: Path) -> None:
    servers = parse_config({"mcpServers": {
        "off": {"command": "x", "disabled": True},
        "windsurf": {"serverUrl": "https://w.example.com/mcp"},
        "gemini": {"httpUrl": "https://g.example.com/mcp"},
    }})
    assert servers["off"].disabled
    assert servers["windsurf"].url == "https://w.example.com/mcp"
    assert servers["gemini"].transport == "http"
    with pytest.raises(ConfigError, match="no `mcpServers`"):
        parse_config({"servers": []})
    with pytest.raises(ConfigError, match="needs a `command`"):
        parse_config({"mcpServers": {"a": {"type": "stdio"}}})
    with pytest.raises(ConfigError, match="unknown type"):
        parse_config({"mcpServers": {"a": {"type": "carrier-pigeon", "url": "x"}}})
    with pytest.raises(ConfigError, match="`args` must be a list"):
        parse_config({"mcpServers": {"a": {"command": "x", "args": "y"}}})
    bad = tmp_path / "bad.json"
    bad.write_text("{nope")
    with pytest.raises(ConfigError, match="not JSON"):
        load_config(bad)
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(tmp_path / "missing.json")


def test_building_in_code() -> None:
    stdio = ServerConfig.stdio("docs", ["python", "server.py"], env={"A": "1"}, timeout=5)
    assert (stdio.command, stdio.args, stdio.timeout) == ("python", ("server.py",), 5)
    http = ServerConfig.http("remote", "https://example.com/mcp")
    assert http.transport == "http"
    with pytest.raises(ConfigError):
        ServerConfig("x", "http")


def test_strip_jsonc_keeps_strings() -> None:
    text = '{"a": "// not a comment", "b": "/* nor this */", "c": [1, 2,], /* x */ "d": "\\"q\\"",}'
    assert json.loads(strip_jsonc(text)) == {"a": "// not a comment", "b": "/* nor this */",
                                             "c": [1, 2], "d": '"q"'}


def test_booleans_must_be_booleans_and_unknown_keys_are_named(
    tmp_path: Path, caplog: pytest.LogCaptureFixture,
) -> None:
    """Issue 37: `"disabled": "false"` once disabled the server."""
    path = tmp_path / "mcp.json"
    for key, value in (("disabled", "false"), ("enabled", 0), ("inheritEnv", "yes")):
        path.write_text(json.dumps({"mcpServers": {"s": {"command": "x", key: value}}}))
        with pytest.raises(ConfigError) as refused:
            load_config(path)
        assert str(refused.value) == (f"{path}: server 's': `{key}` must be true or false, "
                                      f"not {value!r}" + (" (a string)" if isinstance(value, str) else ""))
    path.write_text(json.dumps({"mcpServers": {"s": {"command": "x", "disabled": False,
                                                    "envv": {}, "autoApprove": ["t"]}}}))
    assert load_config(path)["s"].disabled is False
    assert f"{path}: server 's': unknown key 'envv' ignored" in caplog.text
    assert "autoApprove" not in caplog.text


def test_what_is_printed_of_a_server_hides_its_values() -> None:
    stdio = ServerConfig.stdio("s", ["npx", "-y", "pkg", "--key=abcd1234", "--auth", "tok-5678", "-v"],
                               env={"API_KEY": "env-9999"}, secrets=("expanded-1111",))
    assert stdio.shown == "npx -y pkg --key=*** --auth *** -v"
    assert repr(stdio) == ("ServerConfig(name='s', transport='stdio', command='npx -y pkg "
                           "--key=*** --auth *** -v', env={'API_KEY': ***})")
    text = "failed: npx --key=abcd1234 --auth tok-5678 (env-9999, expanded-1111)"
    assert stdio.redact(text) == "failed: npx --key=*** --auth *** (***, ***)"
    http = ServerConfig.http("r", "https://user:pw-2222@example.com:8443/mcp?token=t-3333",
                             headers={"Authorization": "Bearer b-4444"})
    assert http.shown == "https://***@example.com:8443/mcp?token=***"
    assert "b-4444" not in repr(http) and "pw-2222" not in repr(http)
    assert http.redact("GET https://user:pw-2222@example.com:8443/mcp?token=t-3333 b-4444") == \
        "GET https://***:***@example.com:8443/mcp?token=*** ***"  # user info is a secret too


def test_a_stdio_servers_environment_is_an_allow_list() -> None:
    host = {"PATH": "/bin", "HOME": "/home/u", "AWS_SECRET_ACCESS_KEY": "k", "LANG": "C.UTF-8",
            "BASH_FUNC_x%%": "() { :; }", "SHELL": "() { evil; }"}
    plain = ServerConfig.stdio("s", ["x"], env={"OWN": "1", "PATH": "/opt/bin"})
    assert child_environment(plain, host) == {"PATH": "/opt/bin", "HOME": "/home/u",
                                              "LANG": "C.UTF-8", "OWN": "1"}
    everything = ServerConfig.stdio("s", ["x"], env={"OWN": "1"}, inherit_env=True)
    assert child_environment(everything, host) == {**host, "OWN": "1"}
    assert parse_config({"mcpServers": {"s": {"command": "x", "inheritEnv": True}}})["s"].inherit_env
