"""Shared fixtures: the vendored spec schemas, a schema.json validator, small servers,
a real redis-server."""


import json
import logging
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _redis import RedisServer, running

# Modules that spend most of their time in other libraries' processes (the official `mcp`
# SDK, the npm TypeScript SDK, FastMCP): about 40% of the suite's time. They run on the
# floor interpreter (`scripts/test`); `scripts/test-pythons` deselects them with
# `-m "not peers"` on 3.12 and 3.13 to keep CI under 20 minutes (see that script).
PEER_MODULES = frozenset({
    "test_client_interop", "test_client_interop_everything", "test_examples_official_client",
    "test_interop_server_legacy", "test_interop_server_official", "test_interop_sse_2024",
    "test_readme_peers", "test_openapi_interop",
})


# A shell without job control starts background commands (`cmd &`) with SIGINT ignored,
# and an ignored signal stays ignored in every process started below: then the tests'
# Ctrl-C (SIGINT to `nimblemcp listen`, say) would meet a child that cannot hear it. The
# tests stand for a user at a terminal, so the suite starts its processes with the
# default disposition whoever launched it.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.path.stem in PEER_MODULES:
            item.add_marker(pytest.mark.peers)


@pytest.fixture(autouse=True)
def _log_bridges_end_with_their_test() -> Iterator[None]:
    """A `Server(forward_logs=...)` attaches its forwarding handler to a logger once per
    process; one a test attached (to the root, say) would forward the next tests'
    records a second time. Handlers attached during a test are removed after it."""
    from nimblemcp.server import _logbridge

    before = dict(_logbridge._installed)
    yield
    for name, handler in list(_logbridge._installed.items()):
        if before.get(name) is not handler:
            logging.getLogger(name or None).removeHandler(handler)
            del _logbridge._installed[name]


@pytest.fixture(scope="module")
def redis_server() -> Iterator[RedisServer]:
    """A real `redis-server` on loopback for the whole test module (tests/_redis.py:
    a missing redis-server fails, it never skips). Modules that stop and restart it
    get their own: nothing is shared across modules."""
    with running() as server:
        yield server


@pytest.fixture(scope="module")
def redis(redis_server: RedisServer) -> RedisServer:
    """The module's `redis_server`, by the shorter name the deploy tests use."""
    return redis_server


@pytest.fixture
def fresh_redis() -> Iterator[RedisServer]:
    """A `redis-server` of one test's own (for a test that restarts it)."""
    with running() as server:
        yield server


# A copy of what the tests need from the MCP spec (see fixtures/spec/README.md), so a fresh
# clone needs nothing beside the repository.
SPEC_DIR = Path(__file__).resolve().parent / "fixtures" / "spec"
SCHEMA_DIR = SPEC_DIR / "schema" / "2026-07-28"
EXAMPLES_DIR = SCHEMA_DIR / "examples"


def _require_spec() -> None:
    # Fail loudly: the conformance tests are the point, a skip would hide their loss.
    if not (SCHEMA_DIR / "schema.json").is_file():
        raise RuntimeError(
            f"MCP schema fixtures not found at {SPEC_DIR} (see tests/fixtures/spec/README.md)"
        )


class SchemaBook:
    """Validates an instance against one `$defs` entry of a revision's schema.json."""

    def __init__(self, revision: str = "2026-07-28") -> None:
        import jsonschema
        from referencing import Registry, Resource

        _require_spec()
        path = SPEC_DIR / "schema" / revision / "schema.json"
        self.root: dict[str, Any] = json.loads(path.read_text())
        uri = f"urn:mcp:{revision}"
        resource = Resource.from_contents(self.root)
        self.registry: Any = Registry().with_resource(uri, resource)
        self.uri = uri
        self._cls = jsonschema.Draft202012Validator
        self._cache: dict[str, Any] = {}

    @property
    def defs(self) -> dict[str, Any]:
        return self.root["$defs"]  # type: ignore[no-any-return]

    def validator(self, name: str) -> Any:
        v = self._cache.get(name)
        if v is None:
            assert name in self.defs, f"schema.json has no $defs/{name}"
            v = self._cls({"$ref": f"{self.uri}#/$defs/{name}"}, registry=self.registry)
            self._cache[name] = v
        return v

    def check(self, name: str, instance: Any) -> None:
        errors = sorted(self.validator(name).iter_errors(instance), key=lambda e: list(e.path))
        assert not errors, f"not a valid {name}: " + "; ".join(
            f"{list(e.path)}: {e.message[:200]}" for e in errors[:5]
        )


_BOOK: SchemaBook | None = None
_LEGACY_BOOK: SchemaBook | None = None


@pytest.fixture(scope="session")
def legacy_schemas() -> SchemaBook:
    """The 2025-11-25 schema, for what the legacy leg sends."""
    global _LEGACY_BOOK
    if _LEGACY_BOOK is None:
        _LEGACY_BOOK = SchemaBook("2025-11-25")
    return _LEGACY_BOOK


@pytest.fixture(scope="session")
def schemas() -> SchemaBook:
    global _BOOK
    if _BOOK is None:
        _BOOK = SchemaBook()
    return _BOOK


def example_files() -> list[Path]:
    _require_spec()
    files = sorted(EXAMPLES_DIR.rglob("*.json"))
    if not files:
        raise RuntimeError(f"no example files under {EXAMPLES_DIR}")
    return files


PNG = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR"
WAV = b"RIFF\x24\x00\x00\x00WAVEfmt "


def build_full_server() -> Any:
    """A server using every feature once: the source of our wire samples."""
    from typing import TypedDict

    import pydantic

    import nimblemcp as m

    server = m.Server("full", "1.2.3", instructions="Use the tools.", info=m.ServerInfo(title="Full server"))

    class Weather(TypedDict):
        city: str
        celsius: float

    class Point(pydantic.BaseModel):
        x: int
        y: int

    @server.tool(title="Echo", annotations={"readOnlyHint": True, "idempotentHint": True},
                 icons=[{"src": "https://example.com/e.png", "mimeType": "image/png"}])
    def echo(message: str) -> str:
        """Echo a message.

        Args:
            message: what to echo back
        """
        return message

    @server.tool()
    def picture() -> m.ContentBlock:
        return m.image(PNG, "image/png")

    @server.tool()
    def sound() -> m.ContentBlock:
        return m.audio(WAV, "audio/wav")

    @server.tool()
    def link() -> m.ContentBlock:
        return m.resource_link("docs://brief", "brief", mime_type="text/markdown",
                               annotations={"audience": ["user"], "priority": 0.5})

    @server.tool()
    def embed() -> list[m.ContentBlock]:
        return [m.embedded("docs://brief", "# Brief", "text/markdown"),
                m.embedded("bin://x", b"\x00\x01", "application/octet-stream")]

    @server.tool()
    def weather(city: str) -> Weather:
        return {"city": city, "celsius": 21.5}

    @server.tool()
    def point(x: int, y: int) -> Point:
        return Point(x=x, y=y)

    @server.tool()
    def numbers(n: int) -> list[int]:
        return list(range(n))

    @server.tool()
    def fail(reason: str) -> str:
        raise m.ToolError(reason)

    @server.tool()
    async def work(ctx: m.Context) -> str:
        await ctx.report_progress(1, 2, "half")
        await ctx.report_progress(2, 2)
        await ctx.info({"step": "done"}, logger="work")
        return "ok"

    @server.resource("docs://brief", mime_type="text/markdown", description="The brief")
    def brief() -> str:
        return "# Brief"

    @server.resource("bin://logo", mime_type="image/png")
    def logo() -> bytes:
        return PNG

    @server.resource("docs://{name}", mime_type="text/markdown",
                     complete={"name": lambda value, ctx: [n for n in ("brief", "risks") if n.startswith(value)]})
    def doc(name: str) -> str:
        return f"# {name}"

    @server.prompt(complete={"topic": lambda value, ctx: ["alpha", "beta"]})
    def review(topic: str, tone: str = "calm") -> list[dict[str, Any]]:
        """Review a topic.

        Args:
            topic: what to review
            tone: how to sound
        """
        return [m.user(f"Review {topic} ({tone})"), m.assistant(m.text("Sure."))]

    return server


@pytest.fixture
def full_server() -> Any:
    return build_full_server()
