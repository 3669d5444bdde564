"""MCP tools and results in the documented function-calling shapes of the OpenAI Chat
Completions and Responses APIs and the Anthropic Messages API (issue 16)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from nimblemcp.host import (
    Catalog,
    ModelToolCall,
    ServerLists,
    anthropic_tool_result,
    anthropic_tools,
    openai_tool_output,
    openai_tools,
    parse_tool_call,
)

SCHEMA = {"$schema": "https://json-schema.org/draft/2020-12/schema", "type": "object",
          "properties": {"name": {"type": "string"}}, "required": ["name"]}
CATALOG = Catalog({"docs": ServerLists(tools=[
    {"name": "read_doc", "description": "Read one document.", "inputSchema": SCHEMA},
    {"name": "list_docs", "title": "List documents", "inputSchema": {"type": "object"}},
])})
PNG = "iVBORw0KGgo="


def test_tool_definitions_in_each_shape() -> None:
    chat = openai_tools(CATALOG.tools)
    assert chat[0] == {"type": "function", "function": {
        "name": "docs__read_doc", "description": "Read one document.",
        "parameters": {"type": "object", "properties": {"name": {"type": "string"}},
                       "required": ["name"]}}}
    assert chat[1]["function"]["parameters"] == {"type": "object", "properties": {}}
    assert chat[1]["function"]["description"] == "List documents"  # the title, lacking one
    responses = openai_tools(CATALOG.tools, api="responses")
    assert responses[0] == {"type": "function", "name": "docs__read_doc",
                            "description": "Read one document.",
                            "parameters": chat[0]["function"]["parameters"]}
    anthropic = anthropic_tools(CATALOG.tools)
    assert anthropic[0] == {"name": "docs__read_doc", "description": "Read one document.",
                            "input_schema": chat[0]["function"]["parameters"]}
    plain = anthropic_tools([{"name": "raw", "inputSchema": SCHEMA}])  # an MCP dict works too
    assert plain[0]["name"] == "raw"
    assert CATALOG.tools[0].definition["inputSchema"] is SCHEMA and "$schema" in SCHEMA


def test_parse_tool_calls_of_every_shape() -> None:
    chat = {"id": "call_1", "type": "function",
            "function": {"name": "docs__read_doc", "arguments": '{"name": "brief.md"}'}}
    responses = {"type": "function_call", "id": "fc_1", "call_id": "call_2",
                 "name": "docs__list_docs", "arguments": ""}
    anthropic = {"type": "tool_use", "id": "toolu_1", "name": "docs__read_doc",
                 "input": {"name": "risks.md"}}
    assert parse_tool_call(chat) == ModelToolCall("call_1", "docs__read_doc", {"name": "brief.md"})
    assert parse_tool_call(responses) == ModelToolCall("call_2", "docs__list_docs", {})
    assert parse_tool_call(anthropic) == ModelToolCall("toolu_1", "docs__read_doc", {"name": "risks.md"})
    with pytest.raises(ValueError, match="not JSON"):
        parse_tool_call({"id": "c", "function": {"name": "x", "arguments": "{oops"}})
    with pytest.raises(ValueError, match="JSON object"):
        parse_tool_call({"id": "c", "function": {"name": "x", "arguments": "[1]"}})
    with pytest.raises(ValueError, match="known shape"):
        parse_tool_call({"type": "text", "text": "hi"})


RICH: dict[str, Any] = {"content": [
    {"type": "text", "text": "Here it is."},
    {"type": "image", "data": PNG, "mimeType": "image/png"},
    {"type": "audio", "data": "AAAA", "mimeType": "audio/wav"},
    {"type": "resource_link", "uri": "docs://brief.md", "name": "brief.md", "mimeType": "text/markdown"},
    {"type": "resource", "resource": {"uri": "docs://risks.md", "text": "# Risks", "mimeType": "text/markdown"}},
    {"type": "resource", "resource": {"uri": "files://report.pdf", "blob": "JVBERi0=", "mimeType": "application/pdf"}},
]}


def test_anthropic_tool_result_with_every_content_kind() -> None:
    block = anthropic_tool_result(RICH, "toolu_1")
    assert block["type"] == "tool_result" and block["tool_use_id"] == "toolu_1"
    assert "is_error" not in block
    assert block["content"] == [
        {"type": "text", "text": "Here it is."},
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}},
        {"type": "text", "text": "[audio (audio/wav), not shown]"},
        {"type": "text", "text": "[resource link: brief.md <docs://brief.md> (text/markdown)]"},
        {"type": "text", "text": "[resource docs://risks.md]\n# Risks"},
        {"type": "document", "source": {"type": "base64", "media_type": "application/pdf",
                                        "data": "JVBERi0="}},
    ]
    error = anthropic_tool_result({"content": [{"type": "text", "text": "boom"}], "isError": True}, "t")
    assert error["is_error"] is True
    svg = anthropic_tool_result({"content": [{"type": "image", "data": "PHN2Zz4=",
                                              "mimeType": "image/svg+xml"}]}, "t")
    assert svg["content"] == [{"type": "text", "text": "[image (image/svg+xml), not shown]"}]


def test_openai_outputs_chat_is_text_and_responses_carries_images_and_files() -> None:
    chat = openai_tool_output(RICH, "call_1")
    assert chat["role"] == "tool" and chat["tool_call_id"] == "call_1"
    assert chat["content"].splitlines()[:2] == ["Here it is.", "[image (image/png), not shown]"]
    responses = openai_tool_output(RICH, "call_2", api="responses")
    assert responses["type"] == "function_call_output" and responses["call_id"] == "call_2"
    parts = responses["output"]
    assert parts[0] == {"type": "input_text", "text": "Here it is."}
    assert parts[1] == {"type": "input_image", "image_url": f"data:image/png;base64,{PNG}"}
    assert parts[5] == {"type": "input_file", "filename": "report.pdf",
                        "file_data": "data:application/pdf;base64,JVBERi0="}
    text_only = openai_tool_output({"content": [{"type": "text", "text": "a"},
                                                {"type": "text", "text": "b"}]}, "c", api="responses")
    assert text_only["output"] == "a\nb"
    error = openai_tool_output({"content": [{"type": "text", "text": "no such doc"}], "isError": True}, "c")
    assert error["content"] == "Error: no such doc"
    error_r = openai_tool_output({"content": [{"type": "text", "text": "no"}], "isError": True}, "c",
                                 api="responses")
    assert error_r["output"] == "Error: no"


def test_structured_content_becomes_json_text_when_there_is_no_text() -> None:
    result = {"content": [], "structuredContent": {"temperature": 21.5}}
    assert json.loads(openai_tool_output(result, "c")["content"]) == {"temperature": 21.5}
    block = anthropic_tool_result(result, "t")
    assert json.loads(block["content"][0]["text"]) == {"temperature": 21.5}
    both = {"content": [{"type": "text", "text": "21.5 C"}], "structuredContent": {"t": 21.5}}
    assert openai_tool_output(both, "c")["content"] == "21.5 C"  # not repeated
