"""The contributor tooling stays thin and true (issue 32, point 7): the GitHub workflows
and the pre-commit configuration parse as YAML, every step they run is a script of this
repository that exists and is executable, the pre-commit hooks are the checks
scripts/test runs, the platform script's test files exist, and nothing names one
machine's paths (interpreters are found by scripts/find-python)."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
WORKFLOWS = sorted((ROOT / ".github" / "workflows").glob("*.yml"))
# A command of ours inside a `run:` line: `bash scripts/x`, `scripts/x`, `.ci/run`.
_OURS = re.compile(r"(?:^|\s)((?:scripts|\.ci)/[\w.-]+)")


def _load(path: Path) -> Any:
    return yaml.safe_load(path.read_text())


def _runs(workflow: dict[str, Any]) -> list[str]:
    return [step["run"] for job in workflow["jobs"].values() for step in job["steps"] if "run" in step]


def test_the_workflows_exist_and_parse() -> None:
    assert {p.name for p in WORKFLOWS} == {"ci.yml", "release.yml"}
    for path in WORKFLOWS:
        workflow = _load(path)
        assert isinstance(workflow, dict) and workflow["jobs"], path.name
        for job in workflow["jobs"].values():
            assert job["steps"], path.name


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: p.name)
def test_every_run_step_is_one_of_our_scripts(path: Path) -> None:
    runs = _runs(_load(path))
    assert runs, f"{path.name} runs nothing of ours"
    for command in runs:
        scripts = _OURS.findall(command)
        assert scripts, f"{path.name}: {command!r} is not a script of the repository"
        for script in scripts:
            target = ROOT / script
            assert target.is_file(), f"{path.name} runs {script}, which does not exist"
            assert os.access(target, os.X_OK), f"{script} is not executable"


def test_ci_covers_the_pythons_and_the_platforms() -> None:
    ci = _load(ROOT / ".github" / "workflows" / "ci.yml")
    linux = ci["jobs"]["linux"]
    versions = next(s["with"]["python-version"] for s in linux["steps"] if "setup-python" in s.get("uses", ""))
    assert set(versions.split()) == {"3.11", "3.12", "3.13"}
    assert versions.split()[-1] == "3.11"  # `python3`, the floor scripts/test runs on
    assert _runs({"jobs": {"linux": linux}}) == ["bash .ci/run"]
    platforms = ci["jobs"]["platforms"]
    assert set(platforms["strategy"]["matrix"]["os"]) == {"macos-latest", "windows-latest"}
    assert _runs({"jobs": {"p": platforms}}) == ["bash scripts/test-platform"]


def test_release_builds_with_the_checked_script_and_publishes_by_trusted_publishing() -> None:
    release = _load(ROOT / ".github" / "workflows" / "release.yml")
    assert _runs({"jobs": {"build": release["jobs"]["build"]}}) == ["bash scripts/build dist"]
    publish = release["jobs"]["publish"]
    assert publish["permissions"] == {"id-token": "write"}
    assert any(s.get("uses", "").startswith("pypa/gh-action-pypi-publish@") for s in publish["steps"])
    assert not any("password" in (s.get("with") or {}) for s in publish["steps"])  # no token
    assert "scripts/build" in (ROOT / "scripts" / "test").read_text()  # checked on every run here


def test_pre_commit_runs_the_checks_of_scripts_test() -> None:
    hooks = _load(ROOT / ".pre-commit-config.yaml")["repos"][0]["hooks"]
    script = (ROOT / "scripts" / "test").read_text()
    assert [h["id"] for h in hooks] == ["ruff", "mypy", "import-linter"]
    for hook in hooks:
        assert hook["language"] == "system"
        assert hook["entry"] in script, f"{hook['entry']!r} is not what scripts/test runs"


def test_the_platform_script_names_test_files_that_exist() -> None:
    text = (ROOT / "scripts" / "test-platform").read_text()
    files = re.findall(r"^\s+(tests/\S+\.py)$", text, re.MULTILINE)
    assert len(files) >= 10
    for name in files:
        assert (ROOT / name).is_file(), name


def test_find_python_finds_this_interpreter_s_version() -> None:
    import sys

    version = f"{sys.version_info[0]}.{sys.version_info[1]}"
    found = subprocess.run([str(ROOT / "scripts" / "find-python"), version], capture_output=True,
                           text=True, timeout=60, check=True).stdout.strip()
    assert "/shims/" not in found
    reported = subprocess.run([found, "-c", "import sys; print(sys.version_info[:2])"], capture_output=True,
                              text=True, timeout=60, check=True).stdout.strip()
    assert reported == str(sys.version_info[:2])
    missing = subprocess.run([str(ROOT / "scripts" / "find-python"), "3.99"], capture_output=True, timeout=60)
    assert missing.returncode == 1


# Home folders of one machine: a path under them in a shared file works nowhere else.
_MACHINE = re.compile(r"(/root/|/home/[a-z][\w-]*/|/Users/[A-Za-z][\w-]*/)")


def test_nothing_names_one_machine_s_paths() -> None:
    tracked = subprocess.run(["git", "ls-files", "benchmarks", "scripts", ".ci", ".github", "docs",
                              "README.md", "CONTRIBUTING.md", "pyproject.toml", ".pre-commit-config.yaml"],
                             cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    assert tracked, "git ls-files found nothing (not a checkout?)"
    found = []
    for name in tracked:
        path = ROOT / name
        if path.suffix in (".png", ".jpg", ".ico") or not path.is_file():
            continue
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            if _MACHINE.search(line):
                found.append(f"{name}:{number}: {line.strip()}")
    assert not found, "\n".join(found)


def _contract(name: str) -> str:
    text = (ROOT / ".importlinter").read_text()
    start = text.index(f"[importlinter:contract:{name}]")
    end = text.find("\n[", start + 1)
    return text[start:] if end < 0 else text[start:end]


def test_every_server_module_has_a_layer() -> None:
    """Issue 32: no cycle inside server/, type-checking imports included: a module left
    out of the contract would be free to import upwards."""
    layers = re.findall(r"\b_[a-z_]+\b", _contract("server-layers").split("layers =", 1)[1])
    modules = {p.stem for p in (ROOT / "src" / "nimblemcp" / "server").glob("_*.py")} - {"__init__"}
    assert modules - set(layers) == set()


def test_every_transport_module_has_a_side() -> None:
    """Issue 32, point 4: each transport module is a client one, a server one, or shared
    (imported by both and importing neither side)."""
    root = ROOT / "src" / "nimblemcp" / "transports"
    client = _contract("client-transports").split("forbidden_modules", 1)[0]
    server = _contract("transport-roles").split("forbidden_modules", 1)[0]
    shared = {"_sse.py", "_envelope.py", "_read_size.py", "_legacy.py", "stdio/_lines.py"}
    for path in root.rglob("*.py"):
        if path.name == "__init__.py":
            continue
        dotted = "nimblemcp." + ".".join(path.relative_to(root.parent).with_suffix("").parts)
        covered = [m for m in re.findall(r"nimblemcp\.transports[\w.]*", client + server)
                   if dotted == m or dotted.startswith(m + ".")]
        relative = path.relative_to(root).as_posix()
        assert covered or relative in shared or relative.startswith("h1/"), dotted
