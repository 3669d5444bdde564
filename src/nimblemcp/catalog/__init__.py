"""A server's catalog as data: snapshots, lockfiles, classified diffs, typed stubs.

    from nimblemcp.catalog import diff_catalogs, dumps, generate_stubs, take_snapshot

    async with Client("http://127.0.0.1:8000/mcp") as client:
        snapshot = await take_snapshot(client)        # canonical, sorted, no volatile fields
    Path("server.lock.json").write_text(dumps(snapshot))
    found = diff_catalogs(old_snapshot, snapshot)     # breaking / security / compatible
    Path("server_stubs.py").write_text(generate_stubs(snapshot))

- `take_snapshot`, `canonical`, `dumps`, `digest`: the canonical catalog of one server
  (`nimblemcp snapshot`); `Lockfile`, `load_catalog`, `lock_path_for`: many servers pinned
  in one file beside an `mcp.json`;
- `diff_catalogs`, `diff_locks`, `CatalogDiff`, `Change`, `EXIT_CODES`: what changed and
  how bad it is (`nimblemcp diff`);
- `generate_stubs`: a typed client module (`nimblemcp stubs`), and what that module
  imports at run time: `ServerStub`, `NotGiven`/`NOT_GIVEN`, `CallToolResult`,
  `ReadResourceResult`, `GetPromptResult`, `expand_template`.

The library layer under both the CLI commands and the host's pinned catalogs
(`nimblemcp.host.Pinning`). Built on the public `nimblemcp.client` only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from nimblemcp._lazy import lazy_names

if TYPE_CHECKING:
    from nimblemcp.catalog._diff import EXIT_CODES, CatalogDiff, Change, diff_catalogs, diff_locks
    from nimblemcp.catalog._runtime import (
        NOT_GIVEN,
        CallToolResult,
        GetPromptResult,
        NotGiven,
        ReadResourceResult,
        ServerStub,
        expand_template,
    )
    from nimblemcp.catalog._snapshot import (
        Lockfile,
        canonical,
        digest,
        dumps,
        load_catalog,
        lock_path_for,
        take_snapshot,
    )
    from nimblemcp.catalog._stubs import generate_stubs

# A generated module imports the run-time names only: not the generator nor the diff.
_WHERE = {
    "EXIT_CODES": "nimblemcp.catalog._diff",
    "CatalogDiff": "nimblemcp.catalog._diff",
    "Change": "nimblemcp.catalog._diff",
    "diff_catalogs": "nimblemcp.catalog._diff",
    "diff_locks": "nimblemcp.catalog._diff",
    "NOT_GIVEN": "nimblemcp.catalog._runtime",
    "CallToolResult": "nimblemcp.catalog._runtime",
    "GetPromptResult": "nimblemcp.catalog._runtime",
    "NotGiven": "nimblemcp.catalog._runtime",
    "ReadResourceResult": "nimblemcp.catalog._runtime",
    "ServerStub": "nimblemcp.catalog._runtime",
    "expand_template": "nimblemcp.catalog._runtime",
    "Lockfile": "nimblemcp.catalog._snapshot",
    "canonical": "nimblemcp.catalog._snapshot",
    "digest": "nimblemcp.catalog._snapshot",
    "dumps": "nimblemcp.catalog._snapshot",
    "load_catalog": "nimblemcp.catalog._snapshot",
    "lock_path_for": "nimblemcp.catalog._snapshot",
    "take_snapshot": "nimblemcp.catalog._snapshot",
    "generate_stubs": "nimblemcp.catalog._stubs",
}

__all__ = [
    "EXIT_CODES",
    "NOT_GIVEN",
    "CallToolResult",
    "CatalogDiff",
    "Change",
    "GetPromptResult",
    "Lockfile",
    "NotGiven",
    "ReadResourceResult",
    "ServerStub",
    "canonical",
    "diff_catalogs",
    "diff_locks",
    "digest",
    "dumps",
    "expand_template",
    "generate_stubs",
    "load_catalog",
    "lock_path_for",
    "take_snapshot",
]

__getattr__, __dir__ = lazy_names(__name__, globals(), _WHERE)
