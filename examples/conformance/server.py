"""The "everything" server the official MCP conformance suite talks to.

Written the way any nimblemcp user would write a server: decorators, content helpers
and `Context`. Run it with

    python -m nimblemcp run examples/conformance/server.py --transport http --port 3001

and point `npx @modelcontextprotocol/conformance server --url http://localhost:3001/mcp`
at it (or use `scripts/conformance`, which does all of that).

It serves both wires: 2025-11-25 sessions (`initialize`, `Mcp-Session-Id`) and
stateless 2026-07-28 requests.
"""

from __future__ import annotations

import asyncio
import io
import json
import secrets
import struct
import wave
import zlib
from typing import Annotated, Any

from pydantic import Field

from nimblemcp import (
    Context,
    ElicitResult,
    MissingClientCapability,
    Server,
    ServerInfo,
    ToolError,
    audio,
    embedded,
    image,
    text,
    user,
)
from nimblemcp.errors import InternalError

server = Server(
    "nimblemcp-conformance-everything",
    "1.0.0",
    info=ServerInfo(title="nimblemcp everything server",
                    description="Every fixture the MCP conformance suite calls by name."),
    instructions="A test server for the MCP conformance suite; its tools do nothing useful.",
)


# -- media the fixtures return ------------------------------------------------------------


def _png(width: int = 1, height: int = 1, rgba: tuple[int, int, int, int] = (255, 0, 0, 255)) -> bytes:
    """A tiny solid-colour PNG, built by hand so the example needs no imaging library."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body) & 0xFFFFFFFF)

    header = struct.pack(">IIBBBBB", width, height, 8, 6, 0, 0, 0)  # 8-bit RGBA
    row = b"\x00" + bytes(rgba) * width
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(row * height))
        + chunk(b"IEND", b"")
    )


def _wav(milliseconds: int = 50, rate: int = 8000) -> bytes:
    """A short silent mono 16-bit WAV file."""
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(b"\x00\x00" * (rate * milliseconds // 1000))
    return buf.getvalue()


PNG = _png()
WAV = _wav()


# -- tools ------------------------------------------------------------------------------------


@server.tool
def test_simple_text() -> str:
    """Returns one text item."""
    return "This is a simple text response for testing."


@server.tool
def test_image_content():
    """Returns one PNG image item."""
    return image(PNG, "image/png")


@server.tool
def test_audio_content():
    """Returns one WAV audio item."""
    return audio(WAV, "audio/wav")


@server.tool
def test_embedded_resource():
    """Returns one embedded text resource."""
    return embedded("test://embedded-resource", "This is an embedded resource content.", "text/plain")


@server.tool
def test_multiple_content_types():
    """Returns text, an image and an embedded JSON resource, in that order."""
    payload = {"test": "data", "value": 123}
    return [
        text("Multiple content types test:"),
        image(PNG, "image/png"),
        embedded("test://mixed-content-resource", json.dumps(payload), "application/json"),
    ]


@server.tool
async def test_reconnection(ctx: Context) -> str:
    """Ends its SSE stream mid-call; the client resumes with Last-Event-ID (SEP-1699)."""
    ctx.close_sse_stream()
    await asyncio.sleep(0.2)  # the client reconnects meanwhile
    return "Reconnection test completed"


@server.tool
async def test_tool_with_logging(ctx: Context) -> str:
    """Logs three messages while it runs (they are sent only if the request asked for logs)."""
    for step in ("Tool execution started", "Tool processing data", "Tool execution completed"):
        await ctx.info(step)
        await asyncio.sleep(0.05)
    return "Tool with logging executed successfully"


@server.tool
async def test_tool_with_progress(ctx: Context) -> str:
    """Reports progress 0, 50 and 100 of 100 when the request carries a progress token."""
    for done in (0, 50, 100):
        await ctx.report_progress(done, 100, f"{done}% done")
        if done < 100:
            await asyncio.sleep(0.05)
    return f"Tool with progress completed (progress token: {ctx.progress_token!r})"


@server.tool
def test_error_handling() -> str:
    """Always fails with a tool error (isError: true), not a protocol error."""
    raise ToolError("This tool intentionally returns an error for testing")


@server.tool
def test_missing_capability(ctx: Context) -> str:
    """Needs the client's sampling capability; without it the request is refused."""
    if "sampling" not in ctx.client_capabilities:
        raise MissingClientCapability({"sampling": {}})
    return "The client declared sampling."


@server.tool
async def test_logging_tool(ctx: Context) -> str:
    """Logs once; the log is sent only if the request's _meta set a log level."""
    await ctx.info("test_logging_tool ran")
    return "Logged one message."


@server.tool
def test_x_mcp_header(
    region: Annotated[
        str, Field(description="Where to run; mirrored in the Mcp-Param-Region header",
                   json_schema_extra={"x-mcp-header": "Region"}),
    ],
) -> str:
    """Echoes its region; HTTP clients must also send it as the Mcp-Param-Region header."""
    return f"Running in {region}."


CONTACT_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "$defs": {
        "address": {
            "$anchor": "addressDef",
            "type": "object",
            "properties": {"street": {"type": "string"}, "city": {"type": "string"}},
        }
    },
    "properties": {
        "name": {"type": "string"},
        "address": {"$ref": "#/$defs/address"},
        "contactMethod": {"type": "string", "enum": ["phone", "email"]},
        "phone": {"type": "string"},
        "email": {"type": "string"},
    },
    "allOf": [{"anyOf": [{"required": ["phone"]}, {"required": ["email"]}]}],
    "if": {"properties": {"contactMethod": {"const": "phone"}}, "required": ["contactMethod"]},
    "then": {"required": ["phone"]},
    "else": {"required": ["email"]},
    "additionalProperties": False,
}


@server.tool(name="json_schema_2020_12_tool", input_schema=CONTACT_SCHEMA)
def json_schema_2020_12_tool(**contact: Any) -> str:
    """Tool with JSON Schema 2020-12 features"""
    return f"Contact for {contact.get('name', 'someone')} accepted."


# -- asking the client for input (multi round-trip requests) ----------------------------

NAME_FORM = {
    "type": "object",
    "properties": {"name": {"type": "string", "description": "Your name"}},
    "required": ["name"],
}
COLOUR_FORM = {
    "type": "object",
    "properties": {"color": {"type": "string", "description": "Your favourite colour"}},
    "required": ["color"],
}
CONFIRM_FORM = {"type": "object", "properties": {"ok": {"type": "boolean", "description": "Go ahead?"}}}
CONTEXT_FORM = {
    "type": "object",
    "properties": {"context": {"type": "string", "description": "What are you working on?"}},
    "required": ["context"],
}


def _said(reply: dict[str, Any]) -> str:
    """The text of a sampling reply (`content` is one block or a list of blocks)."""
    blocks = reply.get("content")
    blocks = blocks if isinstance(blocks, list) else [blocks]
    return " ".join(b.get("text", "") for b in blocks if isinstance(b, dict) and b.get("type") == "text")


def _field(answer: ElicitResult, name: str) -> str:
    if not answer.accepted or not answer.content:
        return f"(the user chose {answer.action})"
    return str(answer.content.get(name, ""))


@server.tool
async def test_input_required_result_elicitation(ctx: Context) -> str:
    """Asks the user's name, then greets them."""
    answer = await ctx.elicit("user_name", "What is your name?", NAME_FORM)
    return f"Hello, {_field(answer, 'name')}!"


@server.tool
async def test_input_required_result_sampling(ctx: Context) -> str:
    """Asks the client's model a question and reports the answer."""
    reply = await ctx.sample("capital_question", ["What is the capital of France?"], 100)
    return f"The model answered: {_said(reply)}"


@server.tool
async def test_input_required_result_list_roots(ctx: Context) -> str:
    """Asks for the client's roots and lists them."""
    roots = await ctx.roots("client_roots")
    return "Client roots: " + (", ".join(r["uri"] for r in roots) or "(none)")


@server.tool
async def test_input_required_result_request_state(ctx: Context) -> str:
    """Opens a ticket in round one; the ticket survives only in the requestState."""
    ticket = ctx.state.setdefault("ticket", secrets.token_hex(4))
    answer = await ctx.elicit("confirm", f"Confirm ticket {ticket}?", CONFIRM_FORM)
    return f"Ticket {ticket}: the user chose {answer.action}."


@server.tool
async def test_input_required_result_multiple_inputs(ctx: Context) -> str:
    """Asks for a name, a model greeting and the roots, all in one round."""
    name, greeting, roots = ctx.gather(
        ctx.elicit("user_name", "What is your name?", NAME_FORM),
        ctx.sample("greeting", ["Write a one-line greeting."], 100),
        ctx.roots("client_roots"),
    )
    return f"{_said(greeting)} {_field(name, 'name')} ({len(roots)} root(s))"


@server.tool
async def test_input_required_result_multi_round(ctx: Context) -> str:
    """Asks the name, then (in a second round) the favourite colour."""
    ctx.state["rounds"] = ctx.state.get("rounds", 0) + 1
    name = await ctx.elicit("step1", "What is your name?", NAME_FORM)
    ctx.state["name"] = _field(name, "name")
    colour = await ctx.elicit("step2", f"{ctx.state['name']}, what is your favourite colour?", COLOUR_FORM)
    return f"{ctx.state['name']} likes {_field(colour, 'color')} (after {ctx.state['rounds']} rounds)."


@server.tool
async def test_input_required_result_tampered_state(ctx: Context) -> str:
    """Like the request-state tool; a modified requestState is refused by the library."""
    ticket = ctx.state.setdefault("ticket", secrets.token_hex(4))
    answer = await ctx.elicit("confirm", f"Confirm ticket {ticket}?", CONFIRM_FORM)
    return f"Ticket {ticket}: the user chose {answer.action}."


@server.tool
async def test_input_required_result_capabilities(ctx: Context) -> str:
    """Asks only what this request's client can answer (elicitation and/or sampling)."""
    asks = []
    if ctx.supports("elicitation"):
        asks.append(ctx.elicit("user_name", "What is your name?", NAME_FORM))
    if ctx.supports("sampling"):
        asks.append(ctx.sample("capital_question", ["What is the capital of France?"], 100))
    if not asks:
        return "This client can answer neither elicitation nor sampling; nothing to ask."
    answers = ctx.gather(*asks)
    return f"Got {len(answers)} answer(s)."


@server.tool
async def test_streaming_elicitation(ctx: Context) -> str:
    """Needs elicitation; asks through an input_required result, never a separate request."""
    answer = await ctx.elicit("confirmation", "Shall I continue?", CONFIRM_FORM)
    return f"The user chose {answer.action}."


# -- asking the client directly: both eras, one handler each ---------------------------
# On 2025-11-25 sessions these questions go out as real server-to-client requests on the
# call's own SSE stream; on 2026-07-28 they end the round with an input_required result.

DEFAULTS_FORM: dict[str, Any] = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "description": "User name", "default": "John Doe"},
        "age": {"type": "integer", "description": "User age", "default": 30},
        "score": {"type": "number", "description": "User score", "default": 95.5},
        "status": {"type": "string", "description": "User status",
                   "enum": ["active", "inactive", "pending"], "default": "active"},
        "verified": {"type": "boolean", "description": "Verification status", "default": True},
    },
}
ENUMS_FORM: dict[str, Any] = {
    "type": "object",
    "properties": {
        "untitledSingle": {"type": "string", "enum": ["option1", "option2", "option3"]},
        "titledSingle": {"type": "string", "oneOf": [
            {"const": "value1", "title": "First Option"},
            {"const": "value2", "title": "Second Option"},
            {"const": "value3", "title": "Third Option"},
        ]},
        "legacyEnum": {"type": "string", "enum": ["opt1", "opt2", "opt3"],
                       "enumNames": ["Option One", "Option Two", "Option Three"]},
        "untitledMulti": {"type": "array", "items": {"type": "string", "enum": ["option1", "option2", "option3"]}},
        "titledMulti": {"type": "array", "items": {"anyOf": [
            {"const": "value1", "title": "First Choice"},
            {"const": "value2", "title": "Second Choice"},
            {"const": "value3", "title": "Third Choice"},
        ]}},
    },
}
INFO_FORM: dict[str, Any] = {
    "type": "object",
    "properties": {
        "username": {"type": "string", "description": "User's response"},
        "email": {"type": "string", "description": "User's email address"},
    },
    "required": ["username", "email"],
}


@server.tool
async def test_sampling(prompt: str, ctx: Context) -> str:
    """Asks the client's model to answer `prompt` and returns its reply."""
    reply = await ctx.sample("reply", [prompt], 100)
    return f"LLM response: {_said(reply)}"


@server.tool
async def test_elicitation(message: str, ctx: Context) -> str:
    """Asks the user for a username and an email, with `message` as the question."""
    answer = await ctx.elicit("info", message, INFO_FORM)
    return f"User response: action={answer.action}, content={json.dumps(answer.content or {})}"


@server.tool
async def test_elicitation_sep1034_defaults(ctx: Context) -> str:
    """Asks for a form whose every primitive field has a default (SEP-1034)."""
    answer = await ctx.elicit("defaults", "Please review and update the form fields with defaults", DEFAULTS_FORM)
    return f"Elicitation completed: action={answer.action}, content={json.dumps(answer.content or {})}"


@server.tool
async def test_elicitation_sep1330_enums(ctx: Context) -> str:
    """Asks for a form with the five enum shapes of SEP-1330."""
    answer = await ctx.elicit("enums", "Please select options from the enum fields", ENUMS_FORM)
    return f"Elicitation completed: action={answer.action}, content={json.dumps(answer.content or {})}"


_dynamic: dict[str, bool] = {"tool": False, "prompt": False}


def _dynamic_tool() -> str:
    """A tool that test_trigger_tool_change adds and removes."""
    return "I come and go."


def _dynamic_prompt() -> str:
    """A prompt that test_trigger_prompt_change adds and removes."""
    return "I come and go."


@server.tool
def test_trigger_tool_change() -> str:
    """Adds or removes a tool, so the tool list changes."""
    if _dynamic["tool"]:
        server.remove_tool("test_dynamic_tool")
    else:
        server.add_tool(_dynamic_tool, name="test_dynamic_tool")
    _dynamic["tool"] = not _dynamic["tool"]
    return f"test_dynamic_tool is now {'registered' if _dynamic['tool'] else 'gone'}."


@server.tool
def test_trigger_prompt_change() -> str:
    """Adds or removes a prompt, so the prompt list changes."""
    if _dynamic["prompt"]:
        server.remove_prompt("test_dynamic_prompt")
    else:
        server.prompt(name="test_dynamic_prompt")(_dynamic_prompt)
    _dynamic["prompt"] = not _dynamic["prompt"]
    return f"test_dynamic_prompt is now {'registered' if _dynamic['prompt'] else 'gone'}."


# -- resources ----------------------------------------------------------------------------


@server.resource("test://static-text", name="static-text", mime_type="text/plain")
def static_text() -> str:
    """A static text resource."""
    return "This is the content of the static text resource."


@server.resource("test://static-binary", name="static-binary", mime_type="image/png")
def static_binary() -> bytes:
    """A static binary resource (a PNG image)."""
    return PNG


@server.resource("test://watched-resource", name="watched-resource", mime_type="text/plain")
def watched_resource() -> str:
    """A resource clients may watch for updates."""
    return "This resource can be watched for updates."


@server.resource("test://template/{id}/data", name="template-data", mime_type="application/json")
def template_data(id: str) -> str:
    """Data for one item, addressed by id."""
    return json.dumps({"id": id, "templateTest": True, "data": f"Data for ID: {id}"})


# -- prompts ------------------------------------------------------------------------------

_WORDS = ("paris", "park", "party", "test", "testing", "value", "variable")


def _complete_word(value: str, context_args: dict[str, str]) -> list[str]:
    return [w for w in _WORDS if w.startswith(value.lower())]


@server.prompt
def test_simple_prompt() -> str:
    """A prompt without arguments."""
    return "This is a simple prompt for testing."


@server.prompt(complete={"arg1": _complete_word, "arg2": _complete_word})
def test_prompt_with_arguments(arg1: str, arg2: str) -> str:
    """A prompt with two required arguments.

    Args:
        arg1: The first argument.
        arg2: The second argument.
    """
    return f"Prompt with arguments: arg1='{arg1}', arg2='{arg2}'"


@server.prompt
def test_prompt_with_embedded_resource(resourceUri: str):  # the suite names it resourceUri
    """A prompt that embeds a resource.

    Args:
        resourceUri: URI of the resource to embed.
    """
    return [
        user(embedded(resourceUri, f"Embedded resource content for testing ({resourceUri}).", "text/plain")),
        user("Please process the embedded resource above."),
    ]


@server.prompt
def test_prompt_with_image():
    """A prompt that carries an image."""
    return [user(image(PNG, "image/png")), user("Please analyze the image above.")]


@server.prompt
async def test_input_required_result_prompt(ctx: Context):
    """Asks the user for context before building the prompt."""
    answer = await ctx.elicit("user_context", "What context should the prompt use?", CONTEXT_FORM)
    return [user(f"Context: {_field(answer, 'context')}"), user("Please help with the task above.")]


# -- the tasks extension (io.modelcontextprotocol/tasks) -----------------------------------

ANY_FORM: dict[str, Any] = {"type": "object", "properties": {
    "confirm": {"type": "boolean"}, "name": {"type": "string"}}}


@server.tool
def greet(name: str) -> str:
    """A plain synchronous tool: never a task."""
    return f"Hello, {name}!"


@server.tool(task="optional")
async def slow_compute(seconds: float, label: str = "") -> str:
    """Sleeps `seconds`, then answers; runs as a task for clients that declare tasks."""
    await asyncio.sleep(seconds)
    return f"Computed {label or 'result'} after {seconds} s."


@server.tool(task="required")
async def failing_job() -> str:
    """Always ends in a tool execution error (a completed task with isError)."""
    await asyncio.sleep(1)
    raise ToolError("The job failed.")


@server.tool(task="optional")
async def protocol_error_job() -> str:
    """Ends in a protocol error (a failed task)."""
    raise InternalError("The job crashed.")


@server.tool(task="optional")
async def confirm_delete(ctx: Context, filename: str = "file.txt") -> str:
    """Asks for confirmation through the task's inputRequests, then answers."""
    answer = await ctx.elicit("confirm", f"Delete {filename}?", ANY_FORM)
    return f"Deleted {filename}." if answer.accepted else f"Kept {filename}."


@server.tool(task="optional")
async def multi_input(ctx: Context) -> str:
    """Asks two questions at once, so two inputRequests are pending together."""
    first, second = ctx.gather(ctx.elicit("first", "First answer?", ANY_FORM),
                               ctx.elicit("second", "Second answer?", ANY_FORM))
    return f"Got {first.action} and {second.action}."


@server.tool(task="required", defer_task=True)
async def test_tool_with_task(ctx: Context) -> str:
    """Asks for a name through MRTR, then continues as a task."""
    answer = await ctx.elicit("user_name", "What is your name?", NAME_FORM)
    await ctx.as_task()
    return f"Task finished for {_field(answer, 'name')}."


if __name__ == "__main__":
    server.run()
