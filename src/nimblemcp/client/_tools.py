"""Tools on the client: listing (TOOL-11/12 header checks), calling (HTTP-15
`Mcp-Param-*`), and `structuredContent` validation against `outputSchema` (TOOL-04).

`Tools` is the collaborator the Client holds. Validators are built once per tool
definition; remote `$ref`s are never fetched (SCHEMA-02) because the `referencing`
registry has no retriever. Imports `_pipeline`, `_calls`, `_tasks` and below; must not
import `_client`, transports or the server.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from nimblemcp.errors import ClientError, OutputValidationError

from ._calls import all_pages
from ._headers import HeaderRule, InvalidToolHeaders, header_rules, param_headers
from ._pipeline import Pipeline
from ._tasks import Tasks

__all__ = ["OutputValidationError", "Tools"]

logger = logging.getLogger("nimblemcp.client")


class Tools:
    """The tools one Client has seen, their header rules and output validators."""

    def __init__(self, pipeline: Pipeline, tasks: Tasks, *, validate_output: bool) -> None:
        self.pipeline = pipeline
        self.tasks = tasks
        self.validate_output = validate_output
        self.tools: dict[str, dict[str, Any]] = {}
        self._header_rules: dict[str, list[HeaderRule]] = {}
        self._validators: dict[str, Any] = {}
        self._tools_listed = False
        pipeline.on_tools_changed = self.forget_listing

    def forget_listing(self) -> None:
        """tools/list_changed: list again before the next call that needs header rules."""
        self._tools_listed = False

    async def list_tools(self, *, cache: bool = True) -> list[dict[str, Any]]:
        """All tools across pages; tools with invalid `x-mcp-header`s are dropped (TOOL-12)."""
        raw = await all_pages(self.pipeline, "tools/list", "tools", cache)
        kept: list[dict[str, Any]] = []
        tools: dict[str, dict[str, Any]] = {}
        rules: dict[str, list[HeaderRule]] = {}
        malformed = 0
        for tool in raw:
            if not isinstance(tool, dict) or not isinstance(tool.get("name"), str):
                malformed += 1
                continue
            try:
                found = header_rules(tool)
            except InvalidToolHeaders as exc:
                logger.warning("dropping tool %r: invalid x-mcp-header (%s)", tool["name"], exc)
                continue
            kept.append(tool)
            tools[tool["name"]] = tool
            rules[tool["name"]] = found
        if malformed:
            logger.warning("dropping %d tools/list item(s) that are not a tool with a string name",
                           malformed)
        if self.tools != tools:
            self._validators = {}
        self.tools, self._header_rules, self._tools_listed = tools, rules, True
        return kept

    def _output_validator(self, name: str) -> Any:
        if name in self._validators:
            return self._validators[name]
        schema = (self.tools.get(name) or {}).get("outputSchema")
        validator = None
        if isinstance(schema, dict):
            import jsonschema  # type: ignore[import-untyped,unused-ignore]

            cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
            validator = cls(schema)
        self._validators[name] = validator
        return validator

    async def call(
        self, name: str, arguments: Mapping[str, Any] | None, wait: bool,
        on_task_status: Callable[[dict[str, Any]], Any] | None, task_timeout: float | None,
        kw: dict[str, Any],
    ) -> dict[str, Any]:
        """`Client.call_tool`: list first where header rules matter (HTTP-15), re-send
        only idempotent tools (annotations), follow a task, validate the output."""
        args = dict(arguments or {})
        if not self._tools_listed and self.pipeline.transport.carries_param_headers:
            try:
                await self.list_tools()
            except ClientError:
                raise
            except Exception as exc:  # a server without tools/list still gets its call
                logger.debug("could not list tools before calling %r: %s", name, exc)
                self._tools_listed = True
        headers = None
        if self.pipeline.transport.carries_param_headers and self._header_rules.get(name):
            headers = param_headers(self._header_rules[name], args)
        params: dict[str, Any] = {"name": name, "arguments": args}
        if kw.get("retry") is None:  # only tools that say so are re-sent on a broken stream
            hints = (self.tools.get(name) or {}).get("annotations") or {}
            kw["retry"] = isinstance(hints, dict) and hints.get("idempotentHint") is True
        result = await self.pipeline.run("tools/call", params, param_headers=headers, **kw)
        if result.get("resultType") == "task":  # only ever returned to declaring clients
            if not wait:
                return result
            result = await self.tasks.wait_task(result, on_task_status, task_timeout, True)
        if (
            self.validate_output
            and result.get("resultType", "complete") == "complete"
            and not result.get("isError")
        ):
            validator = self._output_validator(name)
            if validator is not None:
                if "structuredContent" not in result:
                    raise OutputValidationError(
                        f"tool {name!r} declares an outputSchema but sent no structuredContent"
                    )
                error = next(iter(validator.iter_errors(result["structuredContent"])), None)
                if error is not None:
                    raise OutputValidationError(
                        f"tool {name!r} returned structuredContent that does not match its "
                        f"outputSchema: {error.message}"
                    )
        return result
