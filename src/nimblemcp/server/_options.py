"""Typed option groups for a Server, their defaults, and the one place the environment
is read.

- `ServerInfo`: what a client may show of the server beside its name and version.
- `ListOptions`: how lists are served: page size and caching hints.
- `StateOptions`: sealing of MRTR `requestState` (key ring, TTL, single use, audience)
  and the TTL of state handles.
- `Backends`: the key-value store and the notification bus (in-memory by default).
- `ListenOptions`: `subscriptions/listen` and change notifications.
- `LegacyOptions` (defined with the port, which the transports read): 2025-11-25
  sessions: server-to-client request timeout, idle expiry, session table size.
- `ToolOptions`: how tool failures and results are reported (masking, output checks).
- `TaskOptions`: the tasks extension: record lifetime, poll interval, and the lease
  that lets other instances notice a task whose instance died.
- `ServerSettings`: what the process environment says (`NIMBLEMCP_STATE_KEYS`,
  `NIMBLEMCP_REDIS_URL`). Read by `ServerSettings.from_env()` only, which the serving
  entry points (`Server.run()`, `Server.asgi_app()`, `nimblemcp run`) call; never by
  `Server.__init__`. What the code passed explicitly always wins over the environment.

`None` always means "not given: use the default". Imports only the port, backends
and the standard library. The backends a
server opens itself for `NIMBLEMCP_REDIS_URL` are `_own_backends`'.
(`backends.from_env()` remains for code that builds its own backends by hand.)
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from nimblemcp._port import LegacyOptions as LegacyOptions  # an option group, defined with the port

if TYPE_CHECKING:
    from nimblemcp.backends._store import KeyValueStore
    from nimblemcp.backends.bus import NotificationBus

__all__ = [
    "ENV_REDIS_URL", "ENV_STATE_KEYS", "Backends", "LegacyOptions", "ListOptions", "ListenOptions", "ServerInfo",
    "ServerSettings", "StateOptions", "TaskOptions", "ToolOptions",
]

ENV_STATE_KEYS = "NIMBLEMCP_STATE_KEYS"
# The same name as `backends._select.ENV_URL` (a test holds them equal): spelled here
# so that a server does not load the backend selection at import (issue 18).
ENV_REDIS_URL = "NIMBLEMCP_REDIS_URL"

@dataclass(frozen=True, slots=True)
class ServerInfo:
    """What a client may show of this server beside its name and version, sent in
    `serverInfo`: `title` (a display name), `description`, `website_url` and `icons`
    (each `{"src": ..., "mimeType": ..., "sizes": [...]}`, as for a tool)."""

    title: str | None = None
    description: str | None = None
    website_url: str | None = None
    icons: Sequence[Mapping[str, Any]] | None = None

    def wire(self, name: str, version: str) -> dict[str, Any]:
        """The `serverInfo` object: the fields given, in the specification's spelling."""
        info: dict[str, Any] = {"name": name, "version": version}
        for key, value in (("title", self.title), ("description", self.description),
                           ("websiteUrl", self.website_url), ("icons", self.icons)):
            if value:
                info[key] = list(value) if key == "icons" else value
        return info


@dataclass(frozen=True, slots=True)
class ListOptions:
    """How `tools/list`, `prompts/list`, `resources/list` and `resources/templates/list`
    are served. `page_size`: items per page (None: all in one page). `cache_hints`:
    method -> (ttlMs, cacheScope), laid over the defaults (`server/_config.py`); a hint
    set here is sent as given, also to authenticated callers."""

    page_size: int | None = None
    cache_hints: Mapping[str, tuple[int, str]] | None = None

    def __post_init__(self) -> None:
        if self.page_size is not None and self.page_size < 1:
            raise ValueError("page_size must be >= 1")
        for ttl, scope in (self.cache_hints or {}).values():
            if ttl < 0 or scope not in ("public", "private"):
                raise ValueError("cache hints need ttl >= 0 and scope 'public' or 'private'")


@dataclass(frozen=True, slots=True)
class StateOptions:
    """How MRTR `requestState` is sealed, and how long state handles live.

    `keys`: base64url 32-byte keys; the first seals, all open (rotation). None: the
    environment's (`NIMBLEMCP_STATE_KEYS`, applied when serving), else a per-process key.
    `ttl`: seconds a requestState stays valid. `one_time`: every requestState of this
    server is single-use (needs a shared store across instances). `audience`: what the
    state is bound to (default: the server's name). `handle_ttl`: seconds a state
    handle lives after its last write.

    Limits (see SECURITY.md): `max_state_size`: characters of one sealed requestState;
    the server refuses to seal more (the tool author gets an error) and refuses to open
    more. `handles_per_caller` / `handle_bytes_per_caller`: live handles and their
    total JSON bytes per authenticated subject (all unauthenticated callers share one
    quota); `max_handle_size`: JSON bytes of one handle's data. Exceeding a handle
    limit is a `HandleLimitExceeded` tool error the model can read."""

    keys: tuple[str, ...] | None = None
    ttl: float = 600.0
    one_time: bool = False
    audience: str | None = None
    handle_ttl: float = 3600.0
    max_state_size: int = 65_536
    handles_per_caller: int = 1_000
    handle_bytes_per_caller: int = 16 * 1024 * 1024
    max_handle_size: int = 1024 * 1024


@dataclass(frozen=True, slots=True)
class Backends:
    """The store (state handles, replay guard, tasks) and the bus (change fan-out).

    None: in-memory (one process), unless `NIMBLEMCP_REDIS_URL` names shared ones when
    serving. `Backends.from_url("redis://...")` builds both for one URL."""

    store: KeyValueStore | None = None
    bus: NotificationBus | None = None

    @classmethod
    def from_url(cls, url: str, *, prefix: str = "nimblemcp:") -> Backends:
        from nimblemcp.backends._select import from_url

        store, bus = from_url(url, prefix=prefix)
        return cls(store, bus)


@dataclass(frozen=True, slots=True)
class ListenOptions:
    """`subscriptions/listen` and list-change notifications (`enabled=False`: neither
    is advertised); `queue`: events a listener may fall behind before it is dropped
    (it then gets `notifications/cancelled`). `max_uris`: URIs one listen filter may
    name, and `max_filter_chars`: their total length; a larger filter is refused with
    -32602 (so the acknowledgement, which echoes the filter, always fits the stream).
    `handover`: at a rolling restart, seconds a listen keeps delivering while its client
    opens a new one elsewhere (make-before-break; see `server/_subscriptions.py`)."""

    enabled: bool = True
    queue: int = 256
    max_uris: int = 1_000
    max_filter_chars: int = 256 * 1024
    handover: float = 5.0


@dataclass(frozen=True, slots=True)
class ToolOptions:
    """How tool failures and results reach the client.

    `mask_errors`: an unexpected exception in a tool answers `isError` with a short
    reference id only; its text and traceback go to the server log under that id
    (`ToolError` messages always pass through). Set False in development to see
    the exception's type and message in the result. `validate_output`: check
    `structuredContent` against the tool's own `outputSchema` and answer `isError`
    saying why when it does not fit."""

    mask_errors: bool = True
    validate_output: bool = True


@dataclass(frozen=True, slots=True)
class TaskOptions:
    """Tasks of the tasks extension (`io.modelcontextprotocol/tasks`).

    `ttl`: seconds a task record lives after its last change (its `ttlMs`).
    `poll_interval`: seconds suggested to polling clients (`pollIntervalMs`).

    With a shared store (Redis), the instance running a task holds a *lease* on it:
    it renews the lease every `heartbeat` seconds while the job runs (also while the
    task waits for input), and the lease lapses `lease` seconds after the last renewal.
    Any instance that reads a task (`tasks/get`, `tasks/update`, `tasks/cancel`, a
    listen watching it) and finds it unfinished with a lapsed lease marks it `failed`
    (-32603, "the server instance running this task stopped") once, atomically, and
    notifies listeners. So a task whose instance was killed fails within about
    `lease` + `heartbeat` seconds instead of staying `working` for its whole `ttl`.
    Keep `lease` several heartbeats long (a slow store or a busy loop must not make a
    live task look dead); lease expiry uses the store's clock (Redis key expiry), not
    the instances' clocks. Each heartbeat also reads the record, so a task cancelled or
    failed elsewhere is stopped on its instance even if the bus lost the message.
    With the in-memory store (one process) there is no lease: nothing else can run it."""

    ttl: float = 3600.0
    poll_interval: float = 0.5
    heartbeat: float = 2.0
    lease: float = 10.0

    def __post_init__(self) -> None:
        if min(self.ttl, self.poll_interval, self.heartbeat, self.lease) <= 0:
            raise ValueError("TaskOptions: every duration must be > 0")
        if self.lease <= self.heartbeat:
            raise ValueError("TaskOptions: lease must be longer than heartbeat (several heartbeats)")


@dataclass(frozen=True, slots=True)
class ServerSettings:
    """What the environment configures for a served Server."""

    state_keys: tuple[str, ...] | None = None
    redis_url: str | None = None

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> ServerSettings:
        """Read `NIMBLEMCP_STATE_KEYS` (comma-separated) and `NIMBLEMCP_REDIS_URL`."""
        env = os.environ if environ is None else environ
        keys = tuple(k.strip() for k in env.get(ENV_STATE_KEYS, "").split(",") if k.strip())
        url = env.get(ENV_REDIS_URL, "").strip()
        return cls(keys or None, url or None)

    def apply(self, server: Configurable) -> None:
        """Fill in what `server` was not given explicitly. Call before serving starts
        (nothing subscribed, nothing sealed yet); applying twice changes nothing more."""
        server._apply_settings(self)


class Configurable(Protocol):
    """What settings are applied to: a `nimblemcp.Server`."""

    def _apply_settings(self, settings: ServerSettings, /) -> None: ...
