"""Pinned catalogs: a server whose catalog changed is reviewed before its changes are used.

    group = ClientGroup.from_config("mcp.json", pinning=Pinning(confirm=review))
    # pins live in mcp.lock.json beside the mcp.json (`nimblemcp snapshot --config
    # mcp.json --write-lock` writes it; so does every accepted change)

Every time a server's catalog is (re)built, its canonical snapshot (`nimblemcp.catalog`)
is compared with its pin. The same: the server's items go into the group's catalog.
Different: a `CatalogChange` (the server, the classified diff, both snapshots) goes to
the pin policy, and until it is decided only the items that are *unchanged* from the
pin are offered; a changed or new tool is neither listed nor callable. The policy
answers "accept" (pin the new catalog, offer everything), "refuse" (keep the pin, keep
the changed items out, or the whole server with `hide="server"`), or "ask": the change
goes to `confirm(change) -> bool`, the consent UI, which sees the diff; with no
`confirm`, asking means no. The default policy, `review_risky`, accepts a server seen
for the first time (its pin is taken then) and changes that are neither
security-relevant nor new tools or prompts, and asks about the rest: a description,
title or annotation that changed, a tool that appeared. A refusal holds until the
catalog changes again. Entering the group (`start`) waits for the first decisions.

`Pinning.lockfile` is where pins are kept (None: in memory, for the group's life, which
still catches a catalog that changes under a running host); `write=False` never writes
it (accepted changes are then pinned in memory only).
Imports the catalog library and the group's own types; no I/O but the lockfile.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import os
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from nimblemcp.catalog._diff import CatalogDiff, Change, diff_catalogs
from nimblemcp.catalog._snapshot import LISTS, Lockfile, canonical, canonical_item, digest
from nimblemcp.errors import ConfigError

from ._catalog import ServerLists

if TYPE_CHECKING:
    from nimblemcp.client import Client

__all__ = [
    "CatalogChange",
    "ConfirmChange",
    "PinDecision",
    "PinGate",
    "PinPolicy",
    "Pinning",
    "review_risky",
    "snapshot_of",
]

logger = logging.getLogger("nimblemcp.host")

PinDecision = Literal["accept", "refuse", "ask"]
"""What a pin policy answers about a changed catalog."""


@dataclass(frozen=True, slots=True)
class CatalogChange:
    """A server's catalog differs from its pin: what a pin policy and the consent UI see.

    `pinned` is None the first time a server is seen (then every item is new)."""

    server: str
    diff: CatalogDiff
    pinned: Mapping[str, Any] | None = field(repr=False)
    current: Mapping[str, Any] = field(repr=False)

    @property
    def first_use(self) -> bool:
        return self.pinned is None

    @property
    def security(self) -> list[Change]:
        """The security-relevant changes (descriptions, titles, annotations loosened)."""
        return self.diff.security

    @property
    def added(self) -> list[Change]:
        """Tools and prompts that were not pinned: text the model has not been shown."""
        return [c for c in self.diff.changes if c.code in ("tool-added", "prompt-added")]

    def render(self) -> str:
        """The diff as readable text (server text escaped)."""
        head = f"{self.server}: " + ("first seen" if self.first_use else "its catalog changed "
                                     "since it was pinned")
        return head + "\n" + self.diff.render()


PinPolicy = Callable[[CatalogChange], "PinDecision | Awaitable[PinDecision]"]
ConfirmChange = Callable[[CatalogChange], "bool | Awaitable[bool]"]


def review_risky(change: CatalogChange) -> PinDecision:
    """The default pin policy: accept a first use and harmless changes; ask about
    security-relevant changes and tools or prompts that appeared."""
    if change.first_use:
        return "accept"
    return "ask" if change.security or change.added else "accept"


@dataclass(frozen=True, slots=True)
class Pinning:
    """How a `ClientGroup` pins its servers' catalogs (see the module docstring).

    `lockfile`: the file of pins (`ClientGroup.from_config` puts it beside the
    mcp.json when None); `policy` decides about a change, `confirm` is asked when it
    says "ask"; `hide` is what a refusal keeps out of the catalog: the changed items
    ("changes") or the whole server ("server"); `write=False` keeps accepted pins in
    memory only."""

    lockfile: str | os.PathLike[str] | None = None
    policy: PinPolicy = review_risky
    confirm: ConfirmChange | None = None
    hide: Literal["changes", "server"] = "changes"
    write: bool = True


def snapshot_of(client: Client, lists: ServerLists) -> dict[str, Any]:
    """The canonical snapshot of a connected server from what the group already holds
    (its discovery and lists): no request is sent."""
    discovered = client.discovered if client.era == "modern" else client.legacy_discover_result()
    return canonical(discovered or {}, tools=lists.tools, prompts=lists.prompts,
                     resources=lists.resources, templates=lists.templates,
                     server_info=client.server_info)


class PinGate:
    """The group's side of pinning: which items of each server the catalog may offer,
    and the reviews of changed catalogs (one at a time per server)."""

    def __init__(self, pinning: Pinning, on_decided: Callable[[str, CatalogChange, bool], None]) -> None:
        self.pinning = pinning
        try:
            self.lock = Lockfile.load(pinning.lockfile) if pinning.lockfile is not None else Lockfile()
        except ValueError as exc:  # unreadable or edited by hand: never run unpinned silently
            raise ConfigError(f"{exc}; fix or remove it (`nimblemcp snapshot --config ... "
                              "--write-lock` pins the servers again)") from None
        self._on_decided = on_decided
        self._refused: dict[str, str] = {}  # server -> digest of the refused catalog
        self._pending: dict[str, tuple[str, asyncio.Task[None]]] = {}
        #: the changes kept out of the catalog now (pending or refused), by server
        self.held: dict[str, CatalogChange] = {}

    def visible(self, server: str, current: Mapping[str, Any], lists: ServerLists) -> ServerLists | None:
        """What of `lists` the catalog may offer now (None: nothing of this server)."""
        key = digest(current)
        pinned = self.lock.get(server)
        if pinned is not None and digest(pinned) == key:
            self.held.pop(server, None)
            self._refused.pop(server, None)
            return lists
        if self._refused.get(server) == key:
            return None if self.pinning.hide == "server" else _unchanged(lists, pinned)
        pending = self._pending.get(server)
        if pending is None or pending[1].done():
            change = CatalogChange(server, diff_catalogs(pinned or {}, current) if pinned is not None
                                   else _first_use(current), pinned, current)
            self.held[server] = change
            task = asyncio.get_running_loop().create_task(self._review(change, key),
                                                          name=f"nimblemcp-pin-review-{server}")
            self._pending[server] = (key, task)
        return _unchanged(lists, pinned)

    async def _review(self, change: CatalogChange, key: str) -> None:
        try:
            accepted = await self._decide(change)
        except asyncio.CancelledError:
            raise
        except Exception:  # a failing policy or UI refuses
            logger.exception("server %s: reviewing its catalog change failed; refused", change.server)
            accepted = False
        if accepted:
            self.lock.set(change.server, change.current)
            if self.pinning.write and self.lock.path is not None:
                self._save(change.server, change.current)
            self.held.pop(change.server, None)
        else:
            self._refused[change.server] = key
        logger.info("server %s: catalog change %s", change.server, "accepted" if accepted else "refused")
        self._on_decided(change.server, change, accepted)

    def _save(self, server: str, snapshot: Mapping[str, Any]) -> None:
        """This server's pin into the file as it is now (another host or a `snapshot
        --write-lock` may have pinned other servers since it was read)."""
        assert self.lock.path is not None
        try:
            on_disk = Lockfile.load(self.lock.path)
            on_disk.set(server, snapshot)
            on_disk.save()
        except (OSError, ValueError) as exc:
            logger.warning("could not write %s: %s (the pin is kept in memory)", self.lock.path, exc)

    async def _decide(self, change: CatalogChange) -> bool:
        decision = self.pinning.policy(change)
        if inspect.isawaitable(decision):
            decision = await decision
        if decision == "accept":
            return True
        if decision == "refuse":
            return False
        if decision != "ask":
            raise ValueError(f"a pin policy returned {decision!r}, not accept/refuse/ask")
        confirm = self.pinning.confirm
        if confirm is None:
            return False
        answer = confirm(change)
        if inspect.isawaitable(answer):
            answer = await answer
        return bool(answer)

    async def settled(self) -> None:
        """Wait for the reviews under way (the first decisions when a group starts); a
        wait that is cancelled (a start-up deadline) leaves the reviews running."""
        while True:
            tasks = [task for _, task in self._pending.values() if not task.done()]
            if not tasks:
                return
            await asyncio.wait(tasks)

    async def close(self) -> None:
        for _, task in self._pending.values():
            task.cancel()
        for _, task in self._pending.values():
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._pending.clear()

    def why_missing(self, name: str) -> str | None:
        """Why a tool or prompt name is not in the catalog, if a held change is why."""
        for server, change in self.held.items():
            for item in change.diff.changes:
                if item.kind in ("tool", "prompt") and name in (item.name, f"{server}.{item.name}",
                                                               f"{server}__{item.name}"):
                    state = "was refused" if server in self._refused else "waits for review"
                    return (f"{item.kind} {item.name!r} of server {server!r} changed since its "
                            f"catalog was pinned and {state}")
        return None


def _first_use(current: Mapping[str, Any]) -> CatalogDiff:
    """A first sight as a diff: every item added."""
    return diff_catalogs({"server": current.get("server") or {},
                          "protocolVersions": current.get("protocolVersions") or [],
                          "capabilities": current.get("capabilities") or {},
                          **({"instructions": current["instructions"]} if "instructions" in current else {})},
                         current)


def _unchanged(lists: ServerLists, pinned: Mapping[str, Any] | None) -> ServerLists:
    """The items of `lists` exactly as pinned."""
    if pinned is None:
        return ServerLists()

    def kept(key: str, items: Any) -> list[Mapping[str, Any]]:
        by = LISTS[key]
        pins = {i.get(by): i for i in pinned.get(key) or () if isinstance(i, Mapping)}
        return [item for item in items if isinstance(item, Mapping)
                and pins.get(item.get(by)) == canonical_item(key, item)]

    return ServerLists(kept("tools", lists.tools), kept("prompts", lists.prompts),
                       kept("resources", lists.resources), kept("resourceTemplates", lists.templates))
