"""The session table of the legacy (2025-11-25) Streamable HTTP leg (LEG-04).

A `HttpSession` is one `initialize`-era client over HTTP: its `LegacySession` (what
the handshake fixed, the back channel, the requests in flight; see `_legacy`), the
credential that opened it and its GET stream, if open. `Sessions` mints ids with
`secrets` (visible ASCII), binds each session to the credential that opened it,
expires idle sessions and keeps the table bounded (LRU eviction, never a 503). Must not import the ASGI app,
uvicorn or the server.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from collections import OrderedDict
from typing import Any

from nimblemcp.transports._legacy import LegacySession

__all__ = ["HttpSession", "Sessions"]


class HttpSession:
    """One legacy client session."""

    __slots__ = ("id", "legacy", "owner", "seen", "stream")

    def __init__(self, sid: str, legacy: LegacySession, owner: Any) -> None:
        self.id = sid
        self.legacy = legacy
        self.owner = owner
        self.seen = time.monotonic()
        self.stream: asyncio.Event | None = None  # set when the GET stream must end

    @property
    def busy(self) -> bool:
        return bool(self.legacy.requests) or self.stream is not None

    def close(self) -> None:
        self.legacy.close()
        if self.stream is not None:
            self.stream.set()
class Sessions:
    """Bounded, idle-expiring table of legacy sessions by id, least recently used first.

    Expiry: a session with nothing in flight (no request, no GET stream) that has
    seen no message for `idle_timeout` seconds is dropped. Pressure: opening a
    session on a full table evicts the least recently used idle session, or, when
    every session is busy, the least recently used one (its requests are cancelled
    and its stream ends): new clients are never locked out by abandoned ones."""

    def __init__(self, max_sessions: int = 10_000, idle_timeout: float = 1800.0) -> None:
        if max_sessions < 1:
            raise ValueError("max_sessions must be >= 1")
        self.max_sessions = max_sessions
        self.idle_timeout = idle_timeout
        self.evicted = 0  # sessions dropped for room (not expiry)
        self._by_id: OrderedDict[str, HttpSession] = OrderedDict()

    def __len__(self) -> int:
        return len(self._by_id)

    def open(self, legacy: LegacySession, owner: Any) -> HttpSession:
        """A new session; on a full table the least recently used one makes room."""
        self._prune()
        while len(self._by_id) >= self.max_sessions:
            victim = next((s for s in self._by_id.values() if not s.busy), None)
            if victim is None:
                victim = next(iter(self._by_id.values()))
            self.drop(victim.id)
            self.evicted += 1
        sid = secrets.token_urlsafe(24)  # [A-Za-z0-9_-]: visible ASCII (LEG-04)
        session = self._by_id[sid] = HttpSession(sid, legacy, owner)
        return session

    def get(self, sid: str, owner: Any) -> HttpSession | None:
        """The live session `sid` if `owner` opened it; None = "not found" (404)."""
        session = self._by_id.get(sid)
        if session is None:
            return None
        now = time.monotonic()
        if not session.busy and now - session.seen > self.idle_timeout:
            self.drop(sid)
            return None
        if session.owner != owner:  # another credential: indistinguishable from unknown
            return None
        session.seen = now
        self._by_id.move_to_end(sid)
        return session

    def touch(self, session: HttpSession) -> None:
        """The session was active just now (e.g. its GET stream ended)."""
        if self._by_id.get(session.id) is session:
            session.seen = time.monotonic()
            self._by_id.move_to_end(session.id)

    def drop(self, sid: str) -> bool:
        session = self._by_id.pop(sid, None)
        if session is None:
            return False
        session.close()
        return True

    def _prune(self) -> None:
        """Drop expired sessions: oldest first, stopping at the first recent one."""
        limit = time.monotonic() - self.idle_timeout
        expired = []
        for s in self._by_id.values():
            if s.seen >= limit:
                break
            if not s.busy:
                expired.append(s.id)
        for sid in expired:
            self.drop(sid)

    def close_all(self) -> None:
        for sid in list(self._by_id):
            self.drop(sid)
