"""A server's catalog as canonical data: what `nimblemcp snapshot` prints and a lockfile pins.

    snapshot = await take_snapshot(client)          # an open Client
    text = dumps(snapshot)                          # the same catalog: the same bytes
    digest(snapshot)                                # "sha256:..."

A snapshot holds what a caller depends on and nothing that moves by itself: the
server's info, its protocol versions, instructions and capabilities, and its tools,
prompts, resources and resource templates, each list sorted by its key (name, URI, URI
template), every object's keys sorted, a schema's `required` sorted. Left out as
volatile: cache hints (`ttlMs`, `cacheScope`), cursors, `resultType`, a resource's
`size` and `annotations.lastModified`. The JSON is ASCII (every other character
escaped), so a lockfile shows hidden characters (bidi controls, zero-width spaces) in a
review, and encodes whatever a server sent.

A *lockfile* pins many servers at once (a host's `mcp.json`):
`{"format": "nimblemcp-lock/1", "servers": {NAME: {"sha256": ..., "catalog": SNAPSHOT}}}`.
Imports the client only to take a snapshot from an open `Client`.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from nimblemcp.client import Client

__all__ = [
    "FORMAT",
    "LOCK_FORMAT",
    "SERVER_INFO_META",
    "Lockfile",
    "canonical",
    "canonical_item",
    "digest",
    "dumps",
    "load_catalog",
    "lock_path_for",
    "take_snapshot",
]

FORMAT = "nimblemcp-catalog/1"
LOCK_FORMAT = "nimblemcp-lock/1"
SERVER_INFO_META = "io.modelcontextprotocol/serverInfo"

#: Keys of a list item (or of its `annotations`) that change on their own.
_VOLATILE_ITEM_KEYS = frozenset({"size"})
_VOLATILE_ANNOTATIONS = frozenset({"lastModified"})
#: The lists of a snapshot and the key each is sorted by.
LISTS: dict[str, str] = {
    "tools": "name", "prompts": "name", "resources": "uri", "resourceTemplates": "uriTemplate",
}
# JSON Schema keywords whose value is a schema, a list of schemas, or a map of schemas.
_ONE = ("additionalProperties", "items", "not", "contains", "propertyNames", "if", "then",
        "else", "unevaluatedItems", "unevaluatedProperties", "additionalItems")
_MANY = ("anyOf", "oneOf", "allOf", "prefixItems")
_MAP = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")


def canonical(
    discovered: Mapping[str, Any], *, tools: Sequence[Any] = (), prompts: Sequence[Any] = (),
    resources: Sequence[Any] = (), templates: Sequence[Any] = (),
    server_info: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The canonical snapshot of a server from its `server/discover` result (or the
    DiscoverResult-shaped view of a 2025-11-25 `initialize`) and its four lists."""
    info = server_info or discovered.get("serverInfo")
    meta = discovered.get("_meta")
    if not isinstance(info, Mapping) and isinstance(meta, Mapping):
        info = meta.get(SERVER_INFO_META)
    versions = discovered.get("supportedVersions")
    snapshot: dict[str, Any] = {
        "format": FORMAT,
        "server": _plain(info) if isinstance(info, Mapping) else {},
        "protocolVersions": sorted(v for v in versions if isinstance(v, str))
        if isinstance(versions, list) else [],
        "capabilities": _plain(discovered.get("capabilities") or {}),
    }
    instructions = discovered.get("instructions")
    if isinstance(instructions, str) and instructions:
        snapshot["instructions"] = instructions
    for key, items in (("tools", tools), ("prompts", prompts), ("resources", resources),
                       ("resourceTemplates", templates)):
        snapshot[key] = _sorted_items(key, items)
    return snapshot


def _sorted_items(key: str, items: Sequence[Any]) -> list[dict[str, Any]]:
    by = LISTS[key]
    kept: dict[str, dict[str, Any]] = {}
    for item in items:
        if isinstance(item, Mapping) and isinstance(item.get(by), str):
            kept.setdefault(item[by], _item(key, item))  # a duplicate: the first one counts
    return [kept[k] for k in sorted(kept)]


def canonical_item(key: str, item: Mapping[str, Any]) -> dict[str, Any]:
    """One item of the list `key` ("tools", "prompts", "resources", "resourceTemplates")
    as a snapshot holds it."""
    return _item(key, item)


def _item(key: str, item: Mapping[str, Any]) -> dict[str, Any]:
    out = {k: _plain(v) for k, v in item.items() if k not in _VOLATILE_ITEM_KEYS}
    annotations = out.get("annotations")
    if isinstance(annotations, dict):
        out["annotations"] = {k: v for k, v in annotations.items() if k not in _VOLATILE_ANNOTATIONS}
    if key == "tools":
        for field in ("inputSchema", "outputSchema"):
            if isinstance(out.get(field), dict):
                out[field] = _schema(out[field])
    if key == "prompts" and isinstance(out.get("arguments"), list):
        out["arguments"] = sorted(
            (a for a in out["arguments"] if isinstance(a, dict)), key=lambda a: str(a.get("name")))
    return out


def _schema(schema: Any) -> Any:
    """A JSON Schema with every `required` list sorted (its order means nothing)."""
    if not isinstance(schema, dict):
        return schema
    out = dict(schema)
    required = out.get("required")
    if isinstance(required, list) and all(isinstance(r, str) for r in required):
        out["required"] = sorted(set(required))
    for key in _ONE:
        if key in out:
            out[key] = _schema(out[key])
    for key in _MANY:
        if isinstance(out.get(key), list):
            out[key] = [_schema(s) for s in out[key]]
    for key in _MAP:
        if isinstance(out.get(key), dict):
            out[key] = {k: _schema(v) for k, v in out[key].items()}
    return out


def _plain(value: Any) -> Any:
    """JSON data as plain dicts and lists (a Mapping or tuple from a caller included)."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def dumps(data: Mapping[str, Any]) -> str:
    """Canonical JSON text: sorted keys, two-space indent, ASCII, one final newline."""
    return json.dumps(data, indent=2, sort_keys=True, ensure_ascii=True) + "\n"


def digest(snapshot: Mapping[str, Any]) -> str:
    """`sha256:<hex>` of the snapshot's canonical text."""
    return "sha256:" + hashlib.sha256(dumps(snapshot).encode("ascii")).hexdigest()


async def take_snapshot(client: Client) -> dict[str, Any]:
    """The canonical snapshot of the server behind an open `Client` (every page of each
    list the server's capabilities promise; no resource templates when it has none)."""
    from nimblemcp.errors import MethodNotFound

    found = await client.discover()
    caps = found.get("capabilities")
    caps = caps if isinstance(caps, Mapping) else {}

    async def listed(capability: str, method: Any) -> list[dict[str, Any]]:
        if capability not in caps:
            return []
        try:
            items: list[dict[str, Any]] = await method()
        except MethodNotFound:  # e.g. resources without templates
            return []
        return items

    tools = await listed("tools", client.list_tools)
    prompts = await listed("prompts", client.list_prompts)
    resources = await listed("resources", client.list_resources)
    templates = await listed("resources", client.list_resource_templates)
    return canonical(found, tools=tools, prompts=prompts, resources=resources,
                     templates=templates, server_info=client.server_info)


class Lockfile:
    """Pinned catalogs by server name, read from and written to one JSON file.

        lock = Lockfile.load("mcp.lock.json")     # empty when the file does not exist
        lock.set("docs", snapshot); lock.save()

    A single server's snapshot file (what `nimblemcp snapshot TARGET` prints) loads
    too, as one server named by its `server.name`. `save()` replaces the file
    atomically (a temporary file in the same folder, then a rename)."""

    def __init__(self, path: str | os.PathLike[str] | None = None,
                 servers: Mapping[str, Mapping[str, Any]] | None = None) -> None:
        self.path = Path(path) if path is not None else None
        self.servers: dict[str, dict[str, Any]] = {k: _plain(v) for k, v in (servers or {}).items()}

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Lockfile:
        if not Path(path).exists():
            return cls(path)
        kind, data = load_catalog(path)
        if kind == "catalog":
            return cls(path, {str(data["server"].get("name") or "server"): data})
        return cls(path, data)

    def get(self, server: str) -> dict[str, Any] | None:
        return self.servers.get(server)

    def set(self, server: str, snapshot: Mapping[str, Any]) -> None:
        self.servers[server] = _plain(snapshot)

    def to_json(self) -> dict[str, Any]:
        return {"format": LOCK_FORMAT, "servers": {
            name: {"sha256": digest(snap), "catalog": snap} for name, snap in self.servers.items()
        }}

    def save(self) -> None:
        if self.path is None:
            raise ValueError("this lockfile has no path to save to")
        write_atomically(self.path, dumps(self.to_json()))


def write_atomically(path: Path, text: str) -> None:
    """Write `text` to `path` by a rename, so a reader never sees half a file."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(text, encoding="ascii")
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


def load_catalog(path: str | os.PathLike[str]) -> tuple[str, dict[str, Any]]:
    """`("catalog", snapshot)` or `("lock", {server: snapshot})` from a file; ValueError
    when it is neither (or a lockfile entry does not match its recorded hash)."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"cannot read {path}: {exc}") from exc
    return parse_catalog(data, str(path))


def parse_catalog(data: Any, where: str = "the catalog") -> tuple[str, dict[str, Any]]:
    """`load_catalog` on already-parsed JSON."""
    if not isinstance(data, dict):
        raise ValueError(f"{where} is not a JSON object")
    kind = data.get("format")
    if kind == FORMAT:
        _check_snapshot(data, where)
        return "catalog", data
    if kind == LOCK_FORMAT:
        servers = data.get("servers")
        if not isinstance(servers, dict):
            raise ValueError(f"{where}: a lockfile needs a `servers` object")
        found: dict[str, Any] = {}
        for name, entry in servers.items():
            snap = entry.get("catalog") if isinstance(entry, dict) else None
            if not isinstance(snap, dict):
                raise ValueError(f"{where}: server {name!r} has no `catalog` object")
            _check_snapshot(snap, f"{where}: server {name!r}")
            recorded = entry.get("sha256")
            if recorded is not None and recorded != digest(snap):
                raise ValueError(f"{where}: server {name!r}: the catalog does not match its "
                                 f"sha256 (edited by hand?); take a new snapshot")
            found[str(name)] = snap
        return "lock", found
    raise ValueError(f"{where} is not a nimblemcp catalog snapshot or lockfile "
                     f"(format {kind!r}; expected {FORMAT!r} or {LOCK_FORMAT!r})")


def _check_snapshot(data: Mapping[str, Any], where: str) -> None:
    if not isinstance(data.get("server"), dict):
        raise ValueError(f"{where}: `server` must be an object")
    for key in LISTS:
        if not isinstance(data.get(key, []), list):
            raise ValueError(f"{where}: `{key}` must be a list")


def lock_path_for(config: str | os.PathLike[str]) -> Path:
    """The lockfile beside a host configuration: `mcp.json` -> `mcp.lock.json`."""
    path = Path(config)
    stem = path.name[:-5] if path.name.endswith(".json") else path.name
    return path.with_name(f"{stem}.lock.json")
