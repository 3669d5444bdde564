"""One error tree (issue 11): every exception class the package defines descends from
`nimblemcp.errors.McpError`, and every public one is defined in `nimblemcp.errors`.

Imports every module of the package (the optional dependencies are installed in the
dev environment), so a new exception anywhere is seen here.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import inspect
import pkgutil
from pathlib import Path

import nimblemcp
from nimblemcp import errors

# Internal control flow that never reaches a caller: each is caught in its own module.
OUTSIDE_THE_TREE = {
    "nimblemcp.server._hints.ArgumentError":
        "tool-argument validation inside ToolEntry.call; becomes an `isError: true` result",
    "nimblemcp.transports.http.security._BodyTooLarge":
        "private: ends the body read in the size-limit middleware, answered with HTTP 413",
    "nimblemcp.transports.auth.verifiers._TooLarge":
        "private: ends a key-set or introspection download past its cap; logged, the token refused (401)",
    "nimblemcp.client._listen._Dropped":
        "private: a listen stream ended early; the Listener reconnects or ends iteration",
    "nimblemcp.cli._install._Refused":
        "CLI-internal: `nimblemcp install` refusing to touch a config; printed, exit status 1",
    "nimblemcp.cli._client_commands.UsageError":
        "CLI-internal: printed as a usage message with exit status 2",
    "nimblemcp.cli._client_commands._NoSuchName":
        "CLI-internal: a tool or prompt name the server lacks, with close matches; printed, exit status 1",
    "nimblemcp.cli._catalog_commands._Failed":
        "CLI-internal: `snapshot|diff|stubs` cannot go on (a file that is no catalog, a server "
        "that did not connect); printed, exit status 2",
}

# Modules whose import runs a program; checked by reading their source instead.
NOT_IMPORTED = {"nimblemcp.__main__": "its body runs the CLI"}


def _modules() -> list[str]:
    names = ["nimblemcp"]
    for info in pkgutil.walk_packages(nimblemcp.__path__, "nimblemcp."):
        names.append(info.name)
    return names


def _defined_exceptions() -> dict[str, type[BaseException]]:
    found: dict[str, type[BaseException]] = {}
    for name in _modules():
        if name in NOT_IMPORTED:
            continue
        module = importlib.import_module(name)
        for obj in vars(module).values():
            if inspect.isclass(obj) and issubclass(obj, Exception) and obj.__module__ == name:
                found[f"{name}.{obj.__qualname__}"] = obj
    return found


def test_every_module_is_walked() -> None:
    names = _modules()
    for expected in ("nimblemcp.errors", "nimblemcp.backends.redis", "nimblemcp.client.auth._flow",
                     "nimblemcp.transports.client.http", "nimblemcp.cli"):
        assert expected in names
    for name, reason in NOT_IMPORTED.items():
        assert name in names, reason
        spec = importlib.util.find_spec(name)
        assert spec is not None and spec.origin is not None
        tree = ast.parse(Path(spec.origin).read_text())
        assert not [n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)], name


def test_every_exception_descends_from_the_root() -> None:
    found = _defined_exceptions()
    assert "nimblemcp.errors.McpError" in found and "nimblemcp.errors.SessionExpired" in found
    outside = {qual for qual, cls in found.items() if not issubclass(cls, errors.McpError)}
    assert outside == set(OUTSIDE_THE_TREE), "add it to the tree in nimblemcp.errors"


def test_public_exceptions_are_defined_in_errors() -> None:
    """Exceptions a public module exports are the classes of `nimblemcp.errors`."""
    for name in _modules():
        if name in NOT_IMPORTED or any(part.startswith("_") for part in name.split(".")):
            continue
        module = importlib.import_module(name)
        for attr in getattr(module, "__all__", ()):
            obj = getattr(module, attr)
            if inspect.isclass(obj) and issubclass(obj, Exception):
                assert obj.__module__ == "nimblemcp.errors", f"{name}.{attr}"
                assert getattr(errors, obj.__name__) is obj
    for cls in (errors.McpError, *[getattr(errors, n) for n in errors.__all__ if n[0].isupper()]):
        assert cls.__doc__ or issubclass(cls, errors.ProtocolError), cls


def test_the_docstring_draws_every_class() -> None:
    doc = errors.__doc__ or ""
    for name in errors.__all__:
        obj = getattr(errors, name)
        if inspect.isclass(obj):
            assert f" {name} " in doc or f"{name}\n" in doc, name


def test_declared_attributes() -> None:
    """Callers read these attributes: they are declared on the classes, not probed."""
    assert errors.TransportError("x").retryable is False
    assert errors.TransportError("x").session_expired is False
    assert errors.StreamBroken("x").retryable is True
    expired = errors.SessionExpired(404, "gone")
    assert expired.session_expired is True and expired.status == 404 and expired.error is None
    assert errors.TaskCancelled("t1").task_id == "t1"
    denied = errors.AuthorizationDenied("access_denied", None)
    assert denied.error == "access_denied" and denied.description is None
    assert isinstance(errors.InvalidToolHeaders("x"), ValueError)


async def test_a_scope_refusal_reaches_the_client_as_insufficient_scope() -> None:
    """AUTH-RS (scopes per tool): the client rebuilds -32001 with `requiredScopes` as the
    tree's InsufficientScope, so `except InsufficientScope` works on the caller's side; the
    same code without that data (another server's meaning of -32001) stays a ProtocolError."""
    import pytest

    from nimblemcp import Server
    from nimblemcp.testing import connect

    server = Server("scoped")

    @server.tool
    def delete_repo(name: str) -> str:
        return name

    server.require_scopes(["repo:admin"], tool="delete_repo")
    async with connect(server) as client:
        with pytest.raises(errors.InsufficientScope) as caught:
            await client.call_tool("delete_repo", {"name": "x"})
    assert caught.value.data == {"requiredScopes": ["repo:admin"]}
    other = errors.error_from_wire({"code": -32001, "message": "something else"})
    assert type(other) is errors.ProtocolError and other.code == -32001
