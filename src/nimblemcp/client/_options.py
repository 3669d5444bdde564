"""The Client's option groups: small frozen dataclasses with the defaults in one place.

    Client(url, timeout=30, retry_policy=RetryPolicy(max_retries=5), limits=Limits(max_connections=8))

Each option has one spelling (issue 32): the everyday ones are `Client`'s own keywords
(`timeout=`, `on_elicit=`..., `tasks=`, `cache=`), the rest live in these groups.
`Callbacks` is the Client's record of its callbacks (built from the keywords, not given).
Built once per Client, read-only afterwards. Imports only `_mrtr` (the callback type), `_cache` and the
transports' limit constants (`nimblemcp.transports._limits`, pure).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass, field
from typing import Any

from nimblemcp.transports._limits import (
    MAX_CONNECTIONS,
    MAX_LIST_ITEMS,
    MAX_LIST_PAGES,
    MAX_MESSAGE_BYTES,
    MAX_REDIRECTS,
)
from nimblemcp.types._meta import TASKS_EXTENSION as TASKS_EXTENSION

from ._cache import CacheStore
from ._mrtr import Callback

__all__ = [
    "TASKS_EXTENSION",
    "CachePolicy",
    "Callbacks",
    "Limits",
    "NotificationCallback",
    "RetryPolicy",
    "TaskPolicy",
]

NotificationCallback = Callable[[dict[str, Any]], Any]


@dataclass(frozen=True, slots=True)
class Callbacks:
    """What answers the server. `on_elicit`/`on_sample`/`on_roots` answer input requests
    (MRTR rounds, task input, legacy server requests) and decide the capabilities
    declared (ELIC-01, SAMP-01, ROOTS-01); `on_log` hears every `notifications/message`
    in both eras (its `params`, plus `"requestId"` naming the request it came with
    when it came with one), `on_notification` every other notification outside a
    request's own progress (and the logs too when there is no `on_log`)."""

    on_elicit: Callback | None = None
    on_sample: Callback | None = None
    on_roots: Callback | None = None
    on_log: NotificationCallback | None = None
    on_notification: NotificationCallback | None = None
    elicitation_modes: tuple[str, ...] = ("form",)
    sampling_capabilities: Mapping[str, Any] | None = None

    def answering(self) -> dict[str, Callback | None]:
        """The input-request callbacks by slot, as `answer_round` takes them."""
        return {"elicit": self.on_elicit, "sample": self.on_sample, "roots": self.on_roots}


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """Repetition (the time limit per request is `Client(timeout=)`): at most
    `max_retries` re-sends of an idempotent request whose stream broke (backoff
    `retry_backoff` seconds, doubling) or that got HTTP 429/503 (after the server's
    `Retry-After` when it is at most `max_retry_after` seconds; a longer one is not
    waited for: the `ServerBusy` error carries it), at most `max_rounds` MRTR rounds,
    and how long a stdio peer may stay silent before it counts as a 2025-11-25 server."""

    max_retries: int = 3
    retry_backoff: float = 0.1
    max_rounds: int = 10
    probe_timeout: float = 5.0
    max_retry_after: float = 30.0


@dataclass(frozen=True, slots=True)
class Limits:
    """What the client transports it builds (URL, command line) accept from a server:
    `max_message_bytes` per message (a JSON body, one SSE event, one stdio line; over
    it the request fails with `MessageTooLarge`), `max_redirects` same-origin 307/308
    hops per HTTP request, and `max_connections` to an HTTP server at once (more
    concurrent requests wait in line for one). A Transport handed in takes its own
    settings. `max_list_pages` and `max_list_items` bound one paged list (`list_tools`
    and the others, any transport): a server that pages past them gets `MessageTooLarge`
    instead of the client's memory (issue 37)."""

    max_message_bytes: int = MAX_MESSAGE_BYTES
    max_redirects: int = MAX_REDIRECTS
    max_connections: int = MAX_CONNECTIONS
    max_list_pages: int = MAX_LIST_PAGES
    max_list_items: int = MAX_LIST_ITEMS

    def __post_init__(self) -> None:
        if self.max_message_bytes <= 0 or self.max_redirects < 0 or self.max_connections < 1:
            raise ValueError("need max_message_bytes > 0, max_redirects >= 0 and max_connections >= 1")
        if self.max_list_pages < 1 or self.max_list_items < 1:
            raise ValueError("need max_list_pages >= 1 and max_list_items >= 1")


@dataclass(frozen=True, slots=True)
class TaskPolicy:
    """Polling tasks (the extension is declared by `Client(tasks=True)`, TASK-01): a task
    is polled every `pollIntervalMs`, kept within `poll_floor`..`poll_cap` seconds
    (TASK-06)."""

    poll_floor: float = 0.05
    poll_cap: float = 5.0

    def __post_init__(self) -> None:
        if not 0 < self.poll_floor <= self.poll_cap:
            raise ValueError("need 0 < poll_floor <= poll_cap")


@dataclass(frozen=True, slots=True)
class CachePolicy:
    """The result cache (CACHE-03..09; off with `Client(cache=False)`): `store` holds
    `public` entries (may be shared between clients); `auth_context` partitions
    `private` ones."""

    store: CacheStore | None = field(default=None, compare=False)
    auth_context: Hashable = None
