"""Issue 18 (start-up): what a stdio server does not need to answer `server/discover` is
loaded on first use, and works the same once loaded.

Each check of what is (not) imported runs in a fresh interpreter: this test process has
imported everything long ago.
"""

from __future__ import annotations

import json
import pickle
import subprocess
import sys
import textwrap

import pytest

from nimblemcp import errors


def _fresh(code: str) -> list[object]:
    """Run `code` in a fresh interpreter; the JSON it prints last."""
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                         check=True, timeout=60).stdout
    result: list[object] = json.loads(out.strip().splitlines()[-1])
    return result


# -- errors: the half a stdio server never meets -------------------------------------------


def test_lazy_errors_load_on_first_use_as_the_same_classes() -> None:
    out = _fresh("""
        import json, pickle, sys
        import nimblemcp.errors as errors
        before = "nimblemcp._errors_more" in sys.modules
        from nimblemcp.errors import StreamBroken, TransportError
        after = "nimblemcp._errors_more" in sys.modules
        try:
            raise StreamBroken("cut")
        except errors.ClientError as exc:
            caught = [type(exc).__module__, type(exc).__qualname__, exc.retryable,
                      isinstance(exc, TransportError), isinstance(exc, errors.McpError)]
        again = pickle.loads(pickle.dumps(StreamBroken("cut")))
        print(json.dumps([before, after, caught, type(again) is errors.StreamBroken, again.args]))
    """)
    assert out == [False, True, ["nimblemcp.errors", "StreamBroken", True, True, True], True, ["cut"]]


def test_every_error_name_resolves_in_a_fresh_interpreter() -> None:
    names = _fresh("""
        import json, nimblemcp.errors as errors
        print(json.dumps({n: getattr(errors, n).__module__ for n in errors.__all__}))
    """)
    assert set(names) == set(errors.__all__)  # type: ignore[arg-type]
    assert set(names.values()) == {"nimblemcp.errors"}  # type: ignore[attr-defined]


@pytest.mark.parametrize("name", sorted(errors._MORE))
def test_lazy_error_names_are_public_documented_and_picklable(name: str) -> None:
    cls = getattr(errors, name)
    assert name in errors.__all__ and name in dir(errors)
    assert cls.__module__ == "nimblemcp.errors" and cls.__qualname__ == name
    assert issubclass(cls, errors.McpError)
    assert pickle.loads(pickle.dumps(cls)) is cls
    assert f" {name} " in (errors.__doc__ or "")


def test_the_lazy_half_defines_exactly_its_names() -> None:
    import nimblemcp._errors_more as more

    defined = {name for name, obj in vars(more).items()
               if isinstance(obj, type) and obj.__module__ == "nimblemcp.errors"}
    assert defined - {"McpError", "ProtocolError"} == errors._MORE  # those two are imported


def test_unknown_error_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="NoSuchError"):
        errors.NoSuchError  # type: ignore[attr-defined]  # noqa: B018
    with pytest.raises(ImportError):
        exec("from nimblemcp.errors import NoSuchError")


def test_picklable_instances_round_trip() -> None:
    for exc in (errors.StreamBroken("x"), errors.RequestTimeout("slow"), errors.BackendError("down"),
                errors.ConfigError("bad"), errors.UnknownName("who")):
        again = pickle.loads(pickle.dumps(exc))
        assert type(again) is type(exc) and again.args == exc.args


# -- the package root: imports with the garbage collector paused -----------------------------


def test_root_names_load_with_the_collector_paused_then_restored() -> None:
    out = _fresh("""
        import gc, json, sys
        import nimblemcp
        seen = []
        real = __import__("importlib").import_module

        def spy(name, package=None):
            seen.append(gc.isenabled())
            return real(name, package)

        __import__("importlib").import_module = spy
        server_class = nimblemcp.Server
        after = gc.isenabled()
        gc.disable()
        nimblemcp.text  # noqa: B018
        still_off = not gc.isenabled()
        gc.enable()
        try:
            nimblemcp._load("nimblemcp.no_such_module")
        except ImportError:
            failed = True
        print(json.dumps([seen, after, still_off, failed, gc.isenabled(), server_class.__name__]))
    """)
    assert out == [[False, False, False], True, True, True, True, "Server"]
