"""The `--config` commands and pinned catalogs: a lockfile beside the mcp.json is honoured.

    nimblemcp snapshot --config mcp.json --write-lock     # pin (writes mcp.lock.json)
    nimblemcp tools --config mcp.json                     # changed items are held, and said so
    nimblemcp call --config mcp.json docs.read_doc ...    # asks on the terminal, with the diff

When `mcp.lock.json` exists beside the mcp.json, every host command runs its group with
`Pinning` on it: a server whose catalog differs from its pin shows only its unchanged
items, and stderr says what is held and how to review or accept it. `call` asks on the
terminal about a change of the server it calls (the diff first); yes updates that
server's pin in the lockfile, no keeps it. Nothing is written otherwise: a server the
lockfile does not name is used as it is, unpinned, until `snapshot --write-lock`.
Without a lockfile the commands behave as before.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

from nimblemcp.catalog._snapshot import Lockfile, lock_path_for

from ._group import ClientGroup
from ._pins import CatalogChange, PinDecision, Pinning

__all__ = ["held_notes", "pinning_for", "terminal_review"]


def pinning_for(config: str, confirm: Callable[[CatalogChange], bool] | None = None) -> Pinning | None:
    """The pinning of a host command: the lockfile beside `config`, when there is one."""
    path = lock_path_for(config)
    if not path.exists():
        return None
    return Pinning(lockfile=path, policy=_unnamed_servers_pass, confirm=confirm, write=False)


def _unnamed_servers_pass(change: CatalogChange) -> PinDecision:
    """A server the lockfile does not name is used unpinned; any change of a pinned one
    is asked about (and refused when nobody can answer)."""
    return "accept" if change.first_use else "ask"


def terminal_review(config: str, server: str) -> Callable[[CatalogChange], bool]:
    """Asks on the terminal about a change of `server` (others stay held): the diff on
    stderr, then y/N; yes writes the new pin to the lockfile."""
    def ask(change: CatalogChange) -> bool:
        if change.server != server:
            return False
        sys.stderr.write(change.render())
        print(f"Use the changed catalog of {server} and update its pin in "
              f"{lock_path_for(config).name}? [y/N] ", end="", file=sys.stderr, flush=True)
        if sys.stdin.readline().strip().lower() not in ("y", "yes"):
            return False
        lock = Lockfile.load(lock_path_for(config))
        lock.set(server, change.current)
        lock.save()
        return True

    return ask


def held_notes(group: ClientGroup, config: str) -> list[str]:
    """One line per server whose changed items are held, saying what to do about it."""
    notes: list[str] = []
    for server, change in group.held_changes.items():
        counts = ", ".join(f"{n} {kind}" for kind, n in (
            ("security-relevant", len(change.diff.security)),
            ("breaking", len(change.diff.breaking)),
            ("compatible", len(change.diff.compatible))) if n)
        notes.append(f"nimblemcp: {server}: its catalog changed since it was pinned ({counts}); "
                     f"the changed items are held back. Review: nimblemcp diff --config {config} "
                     f"{server}; accept: nimblemcp snapshot --config {config} {server} --write-lock")
    return notes
