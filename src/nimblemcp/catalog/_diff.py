"""What changed between two catalogs of a server, each change classified.

    found = diff_catalogs(old_snapshot, new_snapshot)
    found.worst          # "security", "breaking", "compatible" or None
    found.exit_code      # 0 none, 1 compatible, 3 breaking, 4 security-relevant
    print(found.render())

Three classes, each change in exactly one:
- **breaking**: a caller written against the old catalog can fail: a tool, prompt,
  resource or template removed, an argument added as required or made required, a type
  narrowed, an enum value removed, a bound tightened, a default changed, an output field
  removed or made optional, a result type widened, a tool that now must run as a task,
  a protocol version or a capability dropped, a resource's MIME type changed;
- **security-relevant**: what the model reads or what the host's consent rests on
  changed: any description, title or examples (of the server's instructions, a tool, an
  argument, a prompt, a resource), or an annotation loosened by the spec's defaults
  (`readOnlyHint` true to not, `destructiveHint` or `openWorldHint` to true or absent,
  `idempotentHint` true to not), or a resource's audience;
- **compatible**: the rest (a tool added, an optional argument added, a type widened,
  an enum value added, an annotation tightened, the server's version, icons, `_meta`).

The exit code follows the worst class; security-relevant ranks above breaking because
no test catches it: a person has to read it. Pure data; imports nothing from nimblemcp.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from ._schema_diff import Finding, Severity, compare_schemas

__all__ = ["EXIT_CODES", "CatalogDiff", "Change", "ItemKind", "Severity", "diff_catalogs", "diff_locks"]

ItemKind = Literal["server", "tool", "prompt", "resource", "template"]
#: Worst class first.
_RANK: dict[str, int] = {"security": 3, "breaking": 2, "compatible": 1}
#: The exit status of `nimblemcp diff` by the worst class found (2 is an error).
EXIT_CODES: dict[str, int] = {"none": 0, "compatible": 1, "breaking": 3, "security": 4}
_LISTS: tuple[tuple[str, ItemKind, str], ...] = (
    ("tools", "tool", "name"), ("prompts", "prompt", "name"),
    ("resources", "resource", "uri"), ("resourceTemplates", "template", "uriTemplate"),
)
# Tool annotations with the spec's default and the value that is the looser one.
_HINTS: dict[str, tuple[bool, bool]] = {
    "readOnlyHint": (False, False), "destructiveHint": (True, True),
    "idempotentHint": (False, False), "openWorldHint": (True, True),
}


@dataclass(frozen=True, slots=True)
class Change:
    """One change: its class, a stable `code` for scripts, the item it is about
    (`kind` and `name`: a tool's name, a resource's URI, "" for the server itself),
    a sentence, and the old and new values where there are some."""

    severity: Severity
    code: str
    kind: ItemKind
    name: str
    message: str
    old: Any = None
    new: Any = None
    server: str | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"severity": self.severity, "code": self.code, "kind": self.kind,
                               "name": self.name, "message": self.message}
        if self.server is not None:
            out["server"] = self.server
        if self.old is not None:
            out["old"] = self.old
        if self.new is not None:
            out["new"] = self.new
        return out


@dataclass(frozen=True, slots=True)
class CatalogDiff:
    """Every change between two catalogs (or two lockfiles), in a stable order."""

    changes: tuple[Change, ...] = ()
    old_digest: str | None = field(default=None, compare=False)
    new_digest: str | None = field(default=None, compare=False)

    @property
    def worst(self) -> Severity | None:
        if not self.changes:
            return None
        return max((c.severity for c in self.changes), key=_RANK.__getitem__)

    @property
    def exit_code(self) -> int:
        return EXIT_CODES[self.worst or "none"]

    def of(self, severity: Severity) -> list[Change]:
        return [c for c in self.changes if c.severity == severity]

    @property
    def security(self) -> list[Change]:
        return self.of("security")

    @property
    def breaking(self) -> list[Change]:
        return self.of("breaking")

    @property
    def compatible(self) -> list[Change]:
        return self.of("compatible")

    def __bool__(self) -> bool:
        return bool(self.changes)

    def __len__(self) -> int:
        return len(self.changes)

    def counts(self) -> dict[str, int]:
        return {s: len(self.of(s)) for s in ("breaking", "security", "compatible")}  # type: ignore[arg-type]

    def to_json(self) -> dict[str, Any]:
        """What `nimblemcp diff --json` prints."""
        return {"worst": self.worst, "exitCode": self.exit_code, "counts": self.counts(),
                "old": self.old_digest, "new": self.new_digest,
                "changes": [c.to_json() for c in self.changes]}

    def render(self) -> str:
        """Readable text; whatever a server wrote is shown with control and invisible
        characters escaped, so it cannot move the cursor or hide itself in a terminal."""
        if not self.changes:
            return "no changes\n"
        counts = self.counts()
        head = ", ".join(f"{n} {_COUNTED[s]}" for s, n in counts.items() if n)
        lines = [f"{len(self.changes)} change{'s' if len(self.changes) != 1 else ''}: {head}"]
        group: tuple[str | None, str, str] | None = None
        for change in self.changes:
            key = (change.server, change.kind, change.name)
            if key != group:
                group = key
                where = f"{change.kind} {printable(change.name)}" if change.name else change.kind
                if change.server is not None:
                    where = f"[{printable(change.server)}] {where}"
                lines.append("")
                lines.append(where)
            lines.append(f"  {_LABEL[change.severity]}  {printable(change.message)}")
            if change.severity == "security" and (
                isinstance(change.old, str) or isinstance(change.new, str)
            ):
                for sign, text in (("-", change.old), ("+", change.new)):
                    if text is None:
                        continue
                    shown = text.rstrip("\n") if isinstance(text, str) else json.dumps(text, ensure_ascii=True)
                    for row in printable(shown, keep_newlines=True).split("\n"):
                        lines.append(f"      {sign} {row}")
        return "\n".join(lines) + "\n"


_LABEL = {"breaking": "BREAKING  ", "security": "SECURITY  ", "compatible": "compatible"}
_COUNTED = {"breaking": "breaking", "security": "security-relevant", "compatible": "compatible"}


def printable(text: str, *, keep_newlines: bool = False) -> str:
    """`text` with every character that is not printable escaped (`\\x1b`, `\\u202e`...)."""
    out: list[str] = []
    for ch in text:
        if ch.isprintable() or (keep_newlines and ch == "\n"):
            out.append(ch)
        else:
            out.append(ch.encode("unicode_escape").decode("ascii"))
    return "".join(out)


def diff_catalogs(old: Mapping[str, Any], new: Mapping[str, Any], *,
                  server: str | None = None) -> CatalogDiff:
    """The changes from one snapshot of a server to another."""
    from ._snapshot import digest

    found: list[Change] = []
    _server_changes(old, new, found)
    for key, kind, by in _LISTS:
        before = _by(old.get(key), by)
        after = _by(new.get(key), by)
        for name in sorted(set(before) | set(after)):
            if name not in after:
                found.append(Change("breaking", f"{kind}-removed", kind, name, f"{kind} removed"))
            elif name not in before:
                found.append(Change("compatible", f"{kind}-added", kind, name, f"{kind} added"))
            elif before[name] != after[name]:
                _ITEMS[kind](kind, name, before[name], after[name], found)
    if server is not None:
        found = [_on(c, server) for c in found]
    return CatalogDiff(tuple(found), digest(old), digest(new))


def diff_locks(old: Mapping[str, Mapping[str, Any]],
               new: Mapping[str, Mapping[str, Any]]) -> CatalogDiff:
    """The changes between two sets of pinned servers (lockfiles), server by server."""
    found: list[Change] = []
    for name in sorted(set(old) | set(new)):
        if name not in new:
            found.append(Change("breaking", "server-removed", "server", "", "server removed",
                                server=name))
        elif name not in old:
            found.append(Change("compatible", "server-added", "server", "", "server added",
                                server=name))
        else:
            found.extend(diff_catalogs(old[name], new[name], server=name).changes)
    return CatalogDiff(tuple(found))


def _on(change: Change, server: str) -> Change:
    return Change(change.severity, change.code, change.kind, change.name, change.message,
                  change.old, change.new, server)


def _by(items: Any, key: str) -> dict[str, Mapping[str, Any]]:
    out: dict[str, Mapping[str, Any]] = {}
    for item in items if isinstance(items, list) else ():
        if isinstance(item, Mapping) and isinstance(item.get(key), str):
            out.setdefault(item[key], item)
    return out


def _text(kind: ItemKind, name: str, old: Mapping[str, Any], new: Mapping[str, Any],
          keys: Iterable[str], found: list[Change], prefix: str = "") -> None:
    for key in keys:
        a, b = old.get(key), new.get(key)
        if a != b:
            what = "added" if a is None else "removed" if b is None else "changed"
            found.append(Change("security", f"{key}-{what}", kind, name,
                                f"{prefix}{key} {what}", a, b))


def _rest(kind: ItemKind, name: str, old: Mapping[str, Any], new: Mapping[str, Any],
          handled: Iterable[str], found: list[Change]) -> None:
    skip = set(handled)
    for key in sorted((set(old) | set(new)) - skip):
        if old.get(key) != new.get(key):
            found.append(Change("compatible", f"{_kebab(key)}-changed", kind, name,
                                f"{key} changed", old.get(key), new.get(key)))


def _server_changes(old: Mapping[str, Any], new: Mapping[str, Any], found: list[Change]) -> None:
    a_info = _mapping(old.get("server"))
    b_info = _mapping(new.get("server"))
    _text("server", "", a_info, b_info, ("title", "description"), found, "server ")
    _rest("server", "", a_info, b_info, ("title", "description"), found)
    _text("server", "", old, new, ("instructions",), found)
    a_versions = set(old.get("protocolVersions") or ())
    b_versions = set(new.get("protocolVersions") or ())
    for version in sorted(a_versions - b_versions):
        found.append(Change("breaking", "protocol-version-removed", "server", "",
                            f"protocol version {version} no longer supported", version, None))
    for version in sorted(b_versions - a_versions):
        found.append(Change("compatible", "protocol-version-added", "server", "",
                            f"protocol version {version} now supported", None, version))
    a_caps = _mapping(old.get("capabilities"))
    b_caps = _mapping(new.get("capabilities"))
    for cap in sorted(set(a_caps) | set(b_caps)):
        if cap not in b_caps:
            found.append(Change("breaking", "capability-removed", "server", "",
                                f"capability {cap} removed", a_caps[cap], None))
        elif cap not in a_caps:
            found.append(Change("compatible", "capability-added", "server", "",
                                f"capability {cap} added", None, b_caps[cap]))
        elif a_caps[cap] != b_caps[cap]:
            found.append(Change("compatible", "capability-changed", "server", "",
                                f"capability {cap} changed", a_caps[cap], b_caps[cap]))


def _tool(kind: ItemKind, name: str, old: Mapping[str, Any], new: Mapping[str, Any],
          found: list[Change]) -> None:
    _text(kind, name, old, new, ("title", "description"), found)
    a_ann = _mapping(old.get("annotations"))
    b_ann = _mapping(new.get("annotations"))
    _text(kind, name, a_ann, b_ann, ("title",), found, "annotations.")
    read_only = a_ann.get("readOnlyHint") is True and b_ann.get("readOnlyHint") is True
    for hint, (default, loose) in _HINTS.items():
        a = a_ann.get(hint) if isinstance(a_ann.get(hint), bool) else default
        b = b_ann.get(hint) if isinstance(b_ann.get(hint), bool) else default
        if a != b and read_only and hint in ("destructiveHint", "idempotentHint"):
            # meaningful only for a tool that is not read-only (spec)
            found.append(Change("compatible", "annotation-changed", kind, name,
                                f"{hint} {str(a).lower()} -> {str(b).lower()} (a read-only tool)",
                                a_ann.get(hint), b_ann.get(hint)))
        elif a != b:
            loosened = b == loose
            found.append(Change("security" if loosened else "compatible",
                                f"annotation-{'loosened' if loosened else 'tightened'}", kind, name,
                                f"{hint} {str(a).lower()} -> {str(b).lower()}"
                                + (" (loosened)" if loosened else " (tightened)"),
                                a_ann.get(hint), b_ann.get(hint)))
    for key in sorted((set(a_ann) | set(b_ann)) - {*_HINTS, "title"}):
        if a_ann.get(key) != b_ann.get(key):
            found.append(Change("compatible", "annotation-changed", kind, name,
                                f"annotations.{key} changed", a_ann.get(key), b_ann.get(key)))
    for finding in compare_schemas(old.get("inputSchema") or {}, new.get("inputSchema") or {},
                                   output=False):
        found.append(_finding(kind, name, finding, "inputSchema"))
    a_out, b_out = old.get("outputSchema"), new.get("outputSchema")
    if a_out is not None and b_out is None:
        found.append(Change("breaking", "output-schema-removed", kind, name,
                            "outputSchema removed (no structured result promised)"))
    elif a_out is None and b_out is not None:
        found.append(Change("compatible", "output-schema-added", kind, name, "outputSchema added"))
    elif a_out != b_out:
        for finding in compare_schemas(a_out, b_out, output=True):
            found.append(_finding(kind, name, finding, "outputSchema"))
    a_task = _task_support(old)
    b_task = _task_support(new)
    if a_task != b_task:
        severity: Severity = "breaking" if b_task == "required" else "compatible"
        found.append(Change(severity, "task-support-changed", kind, name,
                            f"execution.taskSupport {a_task} -> {b_task}", a_task, b_task))
    a_exec = {k: v for k, v in (old.get("execution") or {}).items() if k != "taskSupport"}
    b_exec = {k: v for k, v in (new.get("execution") or {}).items() if k != "taskSupport"}
    if a_exec != b_exec:
        found.append(Change("compatible", "execution-changed", kind, name, "execution changed",
                            a_exec, b_exec))
    _rest(kind, name, old, new, ("name", "title", "description", "annotations", "inputSchema",
                                 "outputSchema", "execution"), found)


def _task_support(tool: Mapping[str, Any]) -> str:
    execution = tool.get("execution")
    value = execution.get("taskSupport") if isinstance(execution, Mapping) else None
    return value if isinstance(value, str) else "forbidden"


def _finding(kind: ItemKind, name: str, finding: Finding, where: str) -> Change:
    return Change(finding.severity, finding.code, kind, name, f"{where}: {finding.message}",
                  finding.old, finding.new)


def _prompt(kind: ItemKind, name: str, old: Mapping[str, Any], new: Mapping[str, Any],
            found: list[Change]) -> None:
    _text(kind, name, old, new, ("title", "description"), found)
    before = _by(old.get("arguments"), "name")
    after = _by(new.get("arguments"), "name")
    for arg in sorted(set(before) | set(after)):
        a, b = before.get(arg), after.get(arg)
        if b is None:
            found.append(Change("breaking", "argument-removed", kind, name,
                                f"argument {arg} removed"))
        elif a is None:
            required = b.get("required") is True
            found.append(Change("breaking" if required else "compatible",
                                f"argument-added-{'required' if required else 'optional'}", kind,
                                name, f"argument {arg} added as {'required' if required else 'optional'}"))
        else:
            was, now = a.get("required") is True, b.get("required") is True
            if now and not was:
                found.append(Change("breaking", "argument-made-required", kind, name,
                                    f"argument {arg} now required"))
            elif was and not now:
                found.append(Change("compatible", "argument-made-optional", kind, name,
                                    f"argument {arg} no longer required"))
            _text(kind, name, a, b, ("title", "description"), found, f"argument {arg}: ")
            _rest(kind, name, a, b, ("name", "required", "title", "description"), found)
    _rest(kind, name, old, new, ("name", "title", "description", "arguments"), found)


def _resource(kind: ItemKind, name: str, old: Mapping[str, Any], new: Mapping[str, Any],
              found: list[Change]) -> None:
    _text(kind, name, old, new, ("title", "description"), found)
    if old.get("mimeType") != new.get("mimeType"):
        found.append(Change("breaking", "mime-type-changed", kind, name,
                            f"mimeType {old.get('mimeType')} -> {new.get('mimeType')}",
                            old.get("mimeType"), new.get("mimeType")))
    a_ann = _mapping(old.get("annotations"))
    b_ann = _mapping(new.get("annotations"))
    if a_ann.get("audience") != b_ann.get("audience"):  # who the content is for (the model?)
        found.append(Change("security", "audience-changed", kind, name,
                            "annotations.audience changed", a_ann.get("audience"),
                            b_ann.get("audience")))
    if {k: v for k, v in a_ann.items() if k != "audience"} != {
            k: v for k, v in b_ann.items() if k != "audience"}:
        found.append(Change("compatible", "annotation-changed", kind, name, "annotations changed",
                            a_ann, b_ann))
    _rest(kind, name, old, new, ("uri", "uriTemplate", "title", "description", "mimeType",
                                 "annotations"), found)


def _kebab(key: str) -> str:
    return "".join("-" + c.lower() if c.isupper() else c for c in key).lstrip("_-")


_ITEMS = {"tool": _tool, "prompt": _prompt, "resource": _resource, "template": _resource}


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}
