"""`generate_stubs(snapshot)`: a typed Python module for one server's catalog.

    source = generate_stubs(await take_snapshot(client))    # what `nimblemcp stubs` writes

The module holds one class (named after the server, or `class_name`) subclassing
`ServerStub`, with one async method per tool, resource template, resource and prompt:

    async def search_docs(self, *, query: str, limit: int | NotGiven = NOT_GIVEN) -> CallToolResult
    async def weather(self, *, city: str) -> WeatherResult          # a tool with an outputSchema
    async def read_topic_note(self, *, topic: str) -> ReadResourceResult   # a template
    async def read_readme(self) -> ReadResourceResult                # a resource
    async def prompt_review(self, *, topic: str) -> GetPromptResult  # a prompt

Arguments are keyword-only, so reordering a server's properties (or a canonical
snapshot sorting them) can never swap two values. Names are made Python identifiers
(`get-sum` -> `get_sum`, `class` -> `class_`, a second `get_sum` -> `get_sum_2`), the
wire names stay in the call. Descriptions become docstrings, escaped (see `_stub_text`).
The same snapshot gives the same bytes: everything is taken in sorted order and nothing
of the moment (time, paths, versions of nimblemcp) is written.
Pure text generation; imports nothing from nimblemcp but its siblings.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from ._snapshot import digest, dumps
from ._stub_text import SHADOWED, Names, class_name, docstring, identifier, literal
from ._stub_types import TypeWriter

__all__ = ["generate_stubs"]

_INDENT = "    "
_BODY = _INDENT * 2
_WIDTH = 99
# Where a body's arguments object goes: NUL, which no identifier or `ascii()` literal holds.
_ARGS = "\x00"
_EXPRESSION = re.compile(r"\{([+#./;?&]?)([^}]*)\}")


def generate_stubs(snapshot: Mapping[str, Any], *, name: str | None = None) -> str:
    """The source of a module with a typed client class for the catalog in `snapshot`;
    `name` is the class's name (default: made from the server's name)."""
    # through its canonical text: a live snapshot (the server's key order) and the same
    # catalog read back from a lockfile (sorted keys) are one input
    return _Module(json.loads(dumps(snapshot)), name).source()


class _Method:
    """One generated method. Its `body` is one statement where `_ARGS` stands for the
    arguments object built from `pairs` (wire name, parameter): written inline when the
    line fits, else first as a local `_arguments`, one key a line."""

    def __init__(self, name: str, params: list[str], returns: str, doc: str, body: str,
                 pairs: list[tuple[str, str]] | None = None) -> None:
        self.name, self.params, self.returns, self.doc = name, params, returns, doc
        self.body, self.pairs = body, pairs

    def source(self) -> str:
        params = ", ".join(["self", *(["*", *self.params] if self.params else [])])
        head = f"{_INDENT}async def {self.name}({params}) -> {self.returns}:"
        if len(head) > _WIDTH and self.params:
            head = f"{_INDENT}async def {self.name}(\n" + "".join(
                f"{_BODY}{p},\n" for p in ["self", "*", *self.params]) + f"{_INDENT}) -> {self.returns}:"
        return f"{head}\n{_BODY}{docstring(self.doc, _BODY)}\n{self._body()}\n"

    def _body(self) -> str:
        if self.pairs is None:
            return _BODY + self.body
        inline = "{" + ", ".join(f"{literal(k)}: {v}" for k, v in self.pairs) + "}"
        line = _BODY + self.body.replace(_ARGS, inline)
        if len(line) <= _WIDTH:
            return line
        rows = "".join(f"{_BODY}{_INDENT}{literal(k)}: {v},\n" for k, v in self.pairs)
        call = self.body.replace(_ARGS, "_arguments")
        return f"{_BODY}_arguments = {{\n{rows}{_BODY}}}\n{_BODY}{call}"


class _Module:
    def __init__(self, snapshot: Mapping[str, Any], wanted_class: str | None) -> None:
        self.snapshot = snapshot
        info = _mapping(snapshot.get("server"))
        self.info: Mapping[str, Any] = info
        self.module_names = Names(SHADOWED)
        self.class_name = self.module_names.claim(
            class_name(wanted_class or str(info.get("name") or "Server"), "Server"))
        self.types = TypeWriter(self.module_names)
        self.method_names = Names(SHADOWED)
        self.runtime: set[str] = {"ServerStub"}
        self.typing: set[str] = set()
        self.methods: list[_Method] = []

    # -- the whole module --------------------------------------------------------------

    def source(self) -> str:
        for tool in _items(self.snapshot, "tools", "name"):
            self.methods.append(self._tool(tool))
        for template in _items(self.snapshot, "resourceTemplates", "uriTemplate"):
            self.methods.append(self._template(template))
        for resource in _items(self.snapshot, "resources", "uri"):
            self.methods.append(self._resource(resource))
        for prompt in _items(self.snapshot, "prompts", "name"):
            self.methods.append(self._prompt(prompt))
        typing_names = sorted(self.types.uses | self.typing)
        parts = [docstring(self._module_doc(), ""), "", "from __future__ import annotations", ""]
        if typing_names:
            parts.append(f"from typing import {', '.join(typing_names)}")
            parts.append("")
        parts.append(f"from nimblemcp.catalog import {', '.join(sorted(self.runtime, key=_import_order))}")
        parts.append("")
        exported = [self.class_name, *sorted(self._typed_dict_names())]
        parts.append("__all__ = [" + ", ".join(literal(n) for n in ["CATALOG_DIGEST", *sorted(exported)]) + "]")
        parts.append("")
        parts.append(f"CATALOG_DIGEST = {literal(digest(self.snapshot))}")
        for definition in self.types.definitions:
            parts += ["", "", definition]
        parts += ["", "", f"class {self.class_name}(ServerStub):",
                  f"{_INDENT}{docstring(self._class_doc(), _INDENT)}"]
        for method in self.methods:
            parts += ["", method.source().rstrip("\n")]
        return "\n".join(parts) + "\n"

    def _typed_dict_names(self) -> list[str]:
        found = []
        for definition in self.types.definitions:
            head = definition.split("(", 1)[0].split(" = ", 1)[0]
            found.append(head.removeprefix("class ").strip())
        return found

    def _module_doc(self) -> str:
        name = str(self.info.get("title") or self.info.get("name") or "an MCP server")
        version = self.info.get("version")
        return (f"A typed client for {name}" + (f" {version}" if version else "") + ".\n\n"
                "Written by `nimblemcp stubs` from the server's catalog: do not edit it, "
                "generate it again.\n"
                f"Catalog {digest(self.snapshot)}.")

    def _class_doc(self) -> str:
        parts = [str(self.info.get("title") or self.info.get("name") or "An MCP server")
                 + " over an open `nimblemcp.client.Client`: `" + self.class_name + "(client)`."]
        for key in ("description",):
            if isinstance(self.info.get(key), str) and self.info[key].strip():
                parts.append(self.info[key])
        instructions = self.snapshot.get("instructions")
        if isinstance(instructions, str) and instructions.strip():
            parts.append("The server's instructions:\n\n" + instructions)
        return "\n\n".join(parts)

    # -- tools ---------------------------------------------------------------------------

    def _tool(self, tool: Mapping[str, Any]) -> _Method:
        wire = str(tool["name"])
        name = self.method_names.claim(identifier(wire, "tool"))
        hint = class_name(name, "Tool")
        root = _mapping(tool.get("inputSchema"))
        params, args_doc, pairs = self._arguments(root, hint)
        doc = _join(tool.get("title") if tool.get("title") != tool.get("description") else None,
                    tool.get("description"), f"Calls the tool {wire!r}." if not tool.get("description") else None)
        output = tool.get("outputSchema")
        if isinstance(output, Mapping):
            returns = self.types.type_of(output, output, hint + "Result")
            self.typing.add("cast")
            body = (f"return cast({literal(returns)}, "
                    f"await self._call_tool_structured({literal(wire)}, {_ARGS}))")
            returns_doc = "The tool's structured result; `ToolError` when the tool reports an error."
        else:
            self.runtime.add("CallToolResult")
            returns = "CallToolResult"
            body = f"return await self._call_tool({literal(wire)}, {_ARGS})"
            returns_doc = None
        doc = _with_sections(doc, args_doc, returns_doc)
        if isinstance(pairs, str):  # only `arguments`: any names (additionalProperties)
            return _Method(name, params, returns, doc, body.replace(_ARGS, pairs))
        return _Method(name, params, returns, doc, body, pairs)

    def _arguments(self, root: Mapping[str, Any], hint: str,
                   ) -> tuple[list[str], list[tuple[str, str]], list[tuple[str, str]] | str]:
        """Parameters, their docs, and (wire name, parameter) pairs, or the expression of
        the arguments object when the schema names no properties."""
        properties = _mapping(root.get("properties"))
        required = {r for r in root.get("required") or () if isinstance(r, str)}
        names = Names(SHADOWED)
        params: list[str] = []
        docs: list[tuple[str, str]] = []
        pairs: list[tuple[str, str]] = []
        for wire, schema in sorted(properties.items(), key=lambda p: (p[0] not in required, p[0])):
            param = names.claim(identifier(wire, "arg"))
            kind = self.types.type_of(schema, root, hint + class_name(wire, "Arg"))
            if wire in required:
                params.append(f"{param}: {kind}")
            else:
                self.runtime.update(("NotGiven", "NOT_GIVEN"))
                params.append(f"{param}: {kind} | NotGiven = NOT_GIVEN")
            docs.append((param, _param_doc(schema, root, wire, param)))
            pairs.append((wire, param))
        extra = root.get("additionalProperties")
        if not properties and (extra is True or (isinstance(extra, Mapping) and extra)):
            param = names.claim("arguments")
            value = self.types.type_of(extra, root, hint + "Value") if isinstance(extra, Mapping) else "Any"
            if value == "Any":
                self.types.uses.add("Any")
            self.runtime.update(("NotGiven", "NOT_GIVEN"))
            params.append(f"{param}: dict[str, {value}] | NotGiven = NOT_GIVEN")
            docs.append((param, "Any arguments, by name."))
            return params, docs, f"{param} or {{}}"
        return params, docs, pairs

    # -- resources and prompts ---------------------------------------------------------

    def _template(self, template: Mapping[str, Any]) -> _Method:
        uri = str(template["uriTemplate"])
        name = self.method_names.claim("read_" + identifier(str(template.get("name") or uri), "template"))
        names = Names(SHADOWED)
        params: list[str] = []
        docs: list[tuple[str, str]] = []
        pairs: list[tuple[str, str]] = []
        seen: set[str] = set()
        for operator, variables in _EXPRESSION.findall(uri):
            for raw in variables.split(","):
                variable = raw.strip().rstrip("*").partition(":")[0]
                if not variable or variable in seen:
                    continue
                seen.add(variable)
                param = names.claim(identifier(variable, "value"))
                if operator in ("?", "&"):
                    self.runtime.update(("NotGiven", "NOT_GIVEN"))
                    params.append(f"{param}: str | int | NotGiven = NOT_GIVEN")
                else:
                    params.append(f"{param}: str | int")
                docs.append((param, f"The value of {{{variable}}}."))
                pairs.append((variable, param))
        self.runtime.add("ReadResourceResult")
        doc = _join(template.get("title"), template.get("description"), f"Reads {uri}.")
        return _Method(name, params, "ReadResourceResult", _with_sections(doc, docs, None),
                       f"return await self._read_template({literal(uri)}, {_ARGS})", pairs)

    def _resource(self, resource: Mapping[str, Any]) -> _Method:
        uri = str(resource["uri"])
        name = self.method_names.claim("read_" + identifier(str(resource.get("name") or uri), "resource"))
        self.runtime.add("ReadResourceResult")
        doc = _join(resource.get("title"), resource.get("description"), f"Reads {uri}.")
        return _Method(name, [], "ReadResourceResult", doc,
                       f"return await self._read_resource({literal(uri)})")

    def _prompt(self, prompt: Mapping[str, Any]) -> _Method:
        wire = str(prompt["name"])
        name = self.method_names.claim("prompt_" + identifier(wire, "prompt"))
        names = Names(SHADOWED)
        params: list[str] = []
        docs: list[tuple[str, str]] = []
        pairs: list[tuple[str, str]] = []
        arguments = [a for a in prompt.get("arguments") or () if isinstance(a, Mapping)
                     and isinstance(a.get("name"), str)]
        for argument in sorted(arguments, key=lambda a: (a.get("required") is not True, a["name"])):
            param = names.claim(identifier(argument["name"], "arg"))
            if argument.get("required") is True:
                params.append(f"{param}: str")
            else:
                self.runtime.update(("NotGiven", "NOT_GIVEN"))
                params.append(f"{param}: str | NotGiven = NOT_GIVEN")
            docs.append((param, _join(argument.get("title"), argument.get("description"),
                                      f"The argument {argument['name']!r}."
                                      if argument["name"] != param else None)))
            pairs.append((argument["name"], param))
        self.runtime.add("GetPromptResult")
        doc = _join(prompt.get("title"), prompt.get("description"), f"Gets the prompt {wire!r}.")
        return _Method(name, params, "GetPromptResult", _with_sections(doc, docs, None),
                       f"return await self._get_prompt({literal(wire)}, {_ARGS})", pairs)


def _items(snapshot: Mapping[str, Any], key: str, by: str) -> list[Mapping[str, Any]]:
    items = snapshot.get(key)
    found = [i for i in items if isinstance(i, Mapping) and isinstance(i.get(by), str)] \
        if isinstance(items, list) else []
    return sorted(found, key=lambda i: str(i[by]))


def _join(*parts: Any) -> str:
    """The non-empty strings among `parts`, as paragraphs; the last one only when the
    others are all empty (a fallback)."""
    *main, fallback = parts
    found = [str(p).strip() for p in main if isinstance(p, str) and p.strip()]
    if not found and isinstance(fallback, str):
        found = [fallback]
    return "\n\n".join(dict.fromkeys(found))


def _param_doc(schema: Any, root: Mapping[str, Any], wire: str, param: str) -> str:
    from ._schema_diff import resolve_ref

    resolved, _ = resolve_ref(schema, root)
    text = ""
    if isinstance(resolved, Mapping):
        text = _join(resolved.get("description"), None)
        if "default" in resolved:
            from json import dumps

            text += (" " if text else "") + f"(server default: {dumps(resolved['default'], ensure_ascii=False)})"
    if wire != param:
        text += (" " if text else "") + f"(sent as {wire!r})"
    return text


def _with_sections(doc: str, args: list[tuple[str, str]], returns: str | None) -> str:
    text = doc
    args = [(param, about) for param, about in args if about]
    if args:
        rows = []
        for param, about in args:
            lines = about.replace("\r\n", "\n").strip().split("\n")
            rows.append(f"{_INDENT}{param}: {lines[0]}")
            rows += [f"{_INDENT * 2}{line}" if line.strip() else "" for line in lines[1:]]
        text += "\n\nArgs:\n" + "\n".join(rows)
    if returns:
        text += f"\n\nReturns:\n{_INDENT}{returns}"
    return text


def _import_order(name: str) -> tuple[int, str]:
    """isort's order: CONSTANTS, then Classes."""
    return (0 if name.isupper() else 1, name)


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}
