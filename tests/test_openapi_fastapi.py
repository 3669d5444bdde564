"""Servers made from an OpenAPI document (issue 35, item 1): a real FastAPI app served
on a loopback port by uvicorn, its generated document turned into tools, and every call
going over HTTP to it; `Server.from_fastapi` calling the same app in-process over ASGI
with its lifespan; hand-written documents for what FastAPI never writes (OpenAPI 3.0
`nullable`, 3.1 type lists, references outside the document, Swagger 2.0).

TOOL-03/06/08 (schemas, structured results, errors as isError), CACHE-07 (resources
read with forwarded credentials are private), SCHEMA-02 (no reference is fetched).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Annotated, Any

import httpx
import pytest
from _serving import HeaderRecorder, serving
from fastapi import FastAPI, Header, HTTPException, Query
from fastapi.responses import JSONResponse, PlainTextResponse
from pydantic import BaseModel

from nimblemcp import Client, InvalidParams, Server
from nimblemcp.openapi import GET_AS_RESOURCES, RouteMap
from nimblemcp.testing import connect
from nimblemcp.transports.client.http import HttpTransport


class Node(BaseModel):
    label: str
    children: list[Node] = []


class Item(BaseModel):
    id: int
    name: str
    price: float


events: list[str] = []


@contextlib.asynccontextmanager
async def app_lifespan(app: FastAPI) -> AsyncIterator[None]:
    events.append("startup")
    app.state.greeting = "hello from the lifespan"
    yield
    events.append("shutdown")


app = FastAPI(title="Shop", version="2.0.1", lifespan=app_lifespan)


@app.get("/items/{item_id}", operation_id="get_item", summary="Get one item", tags=["items"])
def get_item(item_id: int) -> Item:
    """Look an item up by its number."""
    if item_id != 1:
        raise HTTPException(404, f"no item {item_id}")
    return Item(id=1, name="lamp", price=9.5)


@app.post("/echo/{id}", operation_id="echo_places")
def echo_places(id: int, query_id: Annotated[int, Query(alias="id")],
                item: Item, x_note: Annotated[str | None, Header()] = None) -> dict[str, Any]:
    """Say where each value arrived: the path, the query, the body and a header all name `id`."""
    return {"path": id, "query": query_id, "body": item.id, "note": x_note}


@app.post("/tree", operation_id="count_nodes")
def count_nodes(node: Node) -> Node:
    return Node(label=f"{node.label}+{len(node.children)}", children=node.children)


@app.get("/whoami", operation_id="whoami", tags=["auth"])
def whoami(authorization: Annotated[str | None, Header()] = None) -> dict[str, str]:
    if authorization != "Bearer good-token":
        raise HTTPException(401, "bad or missing token")
    return {"user": "ada"}


@app.get("/numbers", operation_id="numbers")
def numbers(n: int = 3) -> list[int]:
    return list(range(n))


@app.get("/broken", operation_id="broken")
def broken() -> PlainTextResponse:
    return PlainTextResponse("x" * 10_000, status_code=500)


@app.get("/liar", operation_id="liar", response_model=Item)
def liar() -> JSONResponse:
    return JSONResponse({"id": "not a number"})


@app.get("/greeting", operation_id="greeting", tags=["internal"])
def greeting() -> dict[str, str]:
    return {"greeting": app.state.greeting}


@pytest.fixture
async def api() -> AsyncIterator[tuple[str, dict[str, Any]]]:
    """The app on a loopback port (its lifespan off: what a remote API would be), and its document."""
    app.state.greeting = "served"
    async with serving(app) as url, httpx.AsyncClient() as http:
        doc = (await http.get(f"{url}/openapi.json")).json()
        yield url, doc


def by_name(tools: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {t["name"]: t for t in tools}


async def test_operations_become_tools_with_schemas_from_the_document(api: tuple[str, dict[str, Any]]) -> None:
    url, doc = api
    server = Server.from_openapi(doc, base_url=url)
    assert server.name == "Shop" and server.info["version"] == "2.0.1"
    async with connect(server) as client:
        tools = by_name(await client.list_tools())
    assert set(tools) == {"get_item", "echo_places", "count_nodes", "whoami", "numbers", "broken", "liar",
                          "greeting"}
    get_item = tools["get_item"]
    assert get_item["description"] == "Get one item\n\nLook an item up by its number."
    assert get_item["inputSchema"]["required"] == ["item_id"]
    assert get_item["inputSchema"]["properties"]["item_id"]["type"] == "integer"
    assert get_item["annotations"]["readOnlyHint"] is True
    # The response model is an object: it is the outputSchema, references inlined.
    out = get_item["outputSchema"]
    assert out["type"] == "object" and set(out["required"]) == {"id", "name", "price"}
    assert "$defs" not in out and "$ref" not in str(out)
    # A list is no object: no outputSchema (MCP's rule), the JSON comes back as text.
    assert "outputSchema" not in tools["numbers"]
    # Recursive models stay recursive, inside the tool's own $defs.
    tree = tools["count_nodes"]["inputSchema"]
    assert tree["properties"]["children"]["items"]["properties"]["children"]["items"]["$ref"].startswith("#/$defs/")
    assert all(ref.startswith("#/$defs/") for ref in _refs(tree))
    assert set(_refs(tree)) <= {f"#/$defs/{name}" for name in tree["$defs"]}


def _refs(node: Any) -> list[str]:
    if isinstance(node, dict):
        own = [node["$ref"]] if isinstance(node.get("$ref"), str) else []
        return own + [r for v in node.values() for r in _refs(v)]
    if isinstance(node, list):
        return [r for v in node for r in _refs(v)]
    return []


async def test_one_name_in_four_places_keeps_each_value_where_it_belongs(api: tuple[str, dict[str, Any]]) -> None:
    url, doc = api
    async with connect(Server.from_openapi(doc, base_url=url)) as client:
        schema = by_name(await client.list_tools())["echo_places"]["inputSchema"]
        # The path keeps the plain name; the others carry their location.
        assert {"id", "id__query", "id__body", "name", "price", "x-note"} <= set(schema["properties"])
        assert set(schema["required"]) == {"id", "id__query", "id__body", "name", "price"}
        result = await client.call_tool("echo_places", {"id": 1, "id__query": 2, "id__body": 3, "name": "n",
                                                        "price": 1.5, "x-note": "hi"})
    assert result["structuredContent"] == {"path": 1, "query": 2, "body": 3, "note": "hi"}


async def test_calls_answer_structured_errors_bounded_and_checked(api: tuple[str, dict[str, Any]]) -> None:
    url, doc = api
    async with connect(Server.from_openapi(doc, base_url=url)) as client:
        found = await client.call_tool("get_item", {"item_id": 1})
        assert found["structuredContent"] == {"id": 1, "name": "lamp", "price": 9.5}
        assert not found.get("isError")
        missing = await client.call_tool("get_item", {"item_id": 7})
        assert missing["isError"] is True
        assert missing["content"][0]["text"] == 'HTTP 404 Not Found from GET /items/7: {"detail":"no item 7"}'
        # A 10,000-character error body is cut: the model gets the status and the start.
        broken = await client.call_tool("broken", {})
        said = broken["content"][0]["text"]
        assert broken["isError"] is True and said.startswith("HTTP 500 Internal Server Error from GET /broken: xxx")
        assert len(said) < 2200 and said.endswith("(8000 more characters)")
        # An answer that breaks the documented schema is an error, not bad structured content.
        liar = await client.call_tool("liar", {})
        assert liar["isError"] is True and "does not match its documented schema" in liar["content"][0]["text"]
        assert "structuredContent" not in liar
        listed = await client.call_tool("numbers", {"n": 4})
        assert listed["content"] == [{"type": "text", "text": "[0,1,2,3]"}] and "structuredContent" not in listed
        # Arguments are checked against the inputSchema before any HTTP call; the server goes on.
        bad = await client.call_tool("get_item", {"item_id": "one"})
        assert bad["isError"] is True and "Invalid arguments" in bad["content"][0]["text"]
        tree = await client.call_tool("count_nodes", {"label": "root", "children": [{"label": "a"}, {"label": "b"}]})
        assert tree["structuredContent"]["label"] == "root+2"
        assert (await client.call_tool("get_item", {"item_id": 1}))["structuredContent"]["name"] == "lamp"


async def test_headers_of_the_mcp_request_are_forwarded_only_when_named(api: tuple[str, dict[str, Any]]) -> None:
    _, doc = api
    recorder = HeaderRecorder(app)
    async with serving(recorder) as direct:
        forwarding = Server.from_openapi(doc, base_url=direct, forward_headers=["Authorization"])
        silent = Server.from_openapi(doc, base_url=direct)
        for server, expected in ((forwarding, False), (silent, True)):
            async with server.lifespan_context(), serving(server.asgi_app()) as mcp_url:
                transport = HttpTransport(f"{mcp_url}/mcp", headers={"Authorization": "Bearer good-token",
                                                                      "X-Other": "not passed on"})
                async with Client(transport) as client:
                    result = await client.call_tool("whoami", {})
            assert bool(result.get("isError")) is expected, result
            if expected:
                assert "401" in result["content"][0]["text"] and "bad or missing token" in result["content"][0]["text"]
            else:
                assert result["structuredContent"] == {"user": "ada"}
    sent = [h for method, h in recorder.seen if method == "GET"]
    assert sent[0]["authorization"] == "Bearer good-token" and "authorization" not in sent[1]
    assert all("x-other" not in h for h in sent)


async def test_a_header_function_decides_per_request() -> None:
    seen: list[str | None] = []

    async def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers.get("x-api-key"))
        return httpx.Response(200, json={"ok": True})

    doc = {"openapi": "3.1.0", "info": {"title": "t", "version": "1"},
           "paths": {"/ping": {"get": {"operationId": "ping", "responses": {"200": {"description": "ok"}}}}}}
    http = httpx.AsyncClient(transport=httpx.MockTransport(handler), base_url="http://api")
    server = Server.from_openapi(doc, http=http, forward_headers=lambda ctx: {"x-api-key": f"key-{ctx.request_id}"})
    async with connect(server) as client:
        await client.call_tool("ping", {})
    assert seen and seen[0] is not None and seen[0].startswith("key-")
    assert not http.is_closed  # the caller's client is the caller's to close
    await http.aclose()


async def test_routes_names_and_resources(api: tuple[str, dict[str, Any]]) -> None:
    url, doc = api
    server = Server.from_openapi(
        doc, base_url=url, names={"get_item": "item", "count_nodes": "tree"},
        routes=[RouteMap(kind="exclude", tags={"internal"}), RouteMap(kind="exclude", pattern="^/(broken|liar)$"),
                *GET_AS_RESOURCES],
        forward_headers=["authorization"])
    async with connect(server) as client:
        tools = sorted(t["name"] for t in await client.list_tools())
        resources = {r["uri"]: r for r in await client.list_resources()}
        templates = {t["uriTemplate"]: t for t in await client.list_resource_templates()}
        assert tools == ["echo_places", "tree"]  # GETs are resources; excluded ones are gone
        assert set(resources) == {"api://whoami", "api://numbers"}
        assert set(templates) == {"api://items/{item_id}"}
        assert templates["api://items/{item_id}"]["name"] == "item"
        read = await client.read_resource("api://items/1")
        assert read["contents"] == [{"uri": "api://items/1", "mimeType": "application/json",
                                     "text": '{"id":1,"name":"lamp","price":9.5}'}]
        assert read["cacheScope"] == "private"  # fetched with the caller's forwarded headers
        numbers = await client.read_resource("api://numbers")
        assert numbers["contents"][0]["text"] == "[0,1,2]"
        with pytest.raises(InvalidParams) as caught:  # -32602, the resource-not-found code
            await client.read_resource("api://items/5")
        assert caught.value.data == {"uri": "api://items/5"} and "HTTP 404" in str(caught.value)


async def test_from_fastapi_calls_the_app_in_process_inside_its_lifespan() -> None:
    events.clear()
    server = Server.from_fastapi(app, routes=[RouteMap(kind="exclude", tags={"auth"})])
    assert server.name == "Shop"
    async with connect(server) as client:
        assert events == ["startup"]
        names = {t["name"] for t in await client.list_tools()}
        assert "whoami" not in names and "greeting" in names
        greeting = await client.call_tool("greeting", {})
        assert greeting["structuredContent"] == {"greeting": "hello from the lifespan"}
        assert (await client.call_tool("get_item", {"item_id": 1}))["structuredContent"]["price"] == 9.5
    assert events == ["startup", "shutdown"]
    # Started again (a second lifespan), it still reaches the app in-process.
    async with connect(server) as client:
        assert (await client.call_tool("get_item", {"item_id": 1}))["structuredContent"]["name"] == "lamp"


def _doc(paths: dict[str, Any], version: str = "3.0.3", **extra: Any) -> dict[str, Any]:
    return {"openapi": version, "info": {"title": "Hand written", "version": "1"}, "paths": paths, **extra}


def _get(schema: dict[str, Any], name: str = "op") -> dict[str, Any]:
    return {"get": {"operationId": name, "parameters": [{"name": "q", "in": "query", "schema": schema}],
                    "responses": {"200": {"description": "ok"}}}}


async def test_openapi_30_words_become_json_schema() -> None:
    doc = _doc({
        "/a": _get({"type": "string", "nullable": True, "enum": ["x", "y"], "example": "x", "xml": {"name": "q"}},
                   "a"),
        "/b": _get({"type": "integer", "minimum": 1, "exclusiveMinimum": True, "maximum": 9,
                    "exclusiveMaximum": False}, "b"),
        "/c": _get({"$ref": "#/components/schemas/Named"}, "c"),
    }, components={"schemas": {"Named": {"type": "object", "nullable": True, "properties": {"n": {"type": "string"}},
                                         "x-internal": True}}})
    async with connect(Server.from_openapi(doc, base_url="http://127.0.0.1:9")) as client:
        tools = by_name(await client.list_tools())
    assert tools["a"]["inputSchema"]["properties"]["q"] == {"type": ["string", "null"], "enum": ["x", "y", None],
                                                             "examples": ["x"]}
    assert tools["b"]["inputSchema"]["properties"]["q"] == {"type": "integer", "exclusiveMinimum": 1, "maximum": 9}
    assert tools["c"]["inputSchema"]["properties"]["q"] == {"type": ["object", "null"],
                                                             "properties": {"n": {"type": "string"}}}


async def test_openapi_31_and_its_responses() -> None:
    doc = _doc({"/p/{id}": {"get": {
        "operationId": "p",
        "parameters": [{"name": "id", "in": "path", "required": True, "schema": {"type": "string"}}],
        "responses": {"201": {"$ref": "#/components/responses/Thing"},
                      "200": {"description": "ok", "content": {"application/json": {
                          "schema": {"type": ["object", "null"]}}}}}}}},
        version="3.1.0",
        components={"responses": {"Thing": {"description": "made", "content": {"application/json": {
            "schema": {"type": "object", "properties": {"a": {"type": ["integer", "null"]}}}}}}}})
    async with connect(Server.from_openapi(doc, base_url="http://127.0.0.1:9")) as client:
        tool = (await client.list_tools())[0]
    # 200 comes first; an object-or-null answer is not an object: no outputSchema.
    assert "outputSchema" not in tool
    doc["paths"]["/p/{id}"]["get"]["responses"].pop("200")
    async with connect(Server.from_openapi(doc, base_url="http://127.0.0.1:9")) as client:
        tool = (await client.list_tools())[0]
    assert tool["outputSchema"] == {"type": "object", "properties": {"a": {"type": ["integer", "null"]}}}


async def test_references_outside_the_document_are_never_fetched(caplog: pytest.LogCaptureFixture) -> None:
    hits = HeaderRecorder(JSONResponse({"type": "string"}))
    async with serving(hits) as elsewhere:
        doc = _doc({"/far": _get({"$ref": f"{elsewhere}/schema.json"}, "far"),
                    "/loop": _get({"$ref": "#/components/schemas/Loop"}, "loop"),
                    "/near": _get({"type": "string"}, "near")},
                   components={"schemas": {"Loop": {"$ref": "#/components/schemas/Loop"}}})
        with caplog.at_level(logging.WARNING, "nimblemcp.openapi"):
            server = Server.from_openapi(doc, base_url="http://127.0.0.1:9")
        async with connect(server) as client:
            names = [t["name"] for t in await client.list_tools()]
    assert names == ["near"]
    assert hits.seen == []  # nothing asked for the remote schema
    said = caplog.text
    assert "GET /far left out" in said and "points outside the document" in said
    assert "GET /loop left out" in said


def test_documents_that_cannot_be_served_say_why(tmp_path: Any) -> None:
    with pytest.raises(ValueError, match=r"Swagger 2\.0"):
        Server.from_openapi({"swagger": "2.0", "info": {}, "paths": {}}, base_url="http://x")
    with pytest.raises(ValueError, match="give base_url="):
        Server.from_openapi(_doc({}))
    with pytest.raises(ValueError, match="give base_url="):  # a relative server URL needs the document's URL
        Server.from_openapi(_doc({}, servers=[{"url": "/v1"}]))
    (tmp_path / "bad.yaml").write_text("openapi: [unclosed\n")
    with pytest.raises(ValueError, match="neither JSON nor YAML"):
        Server.from_openapi(tmp_path / "bad.yaml", base_url="http://x")
    # Server variables take their defaults; odd operationIds become valid tool names.
    doc = _doc({"/x y": {"get": {"operationId": "list items/{all}", "responses": {}}},
                "/z": {"post": {"responses": {}}}},
               servers=[{"url": "https://{host}/v1", "variables": {"host": {"default": "api.example.com"}}}])
    server = Server.from_openapi(doc)
    assert sorted(server.tools) == ["list_items_all", "post_z"]


async def test_a_yaml_file_loads_and_a_lifespan_given_runs_inside(tmp_path: Any) -> None:
    (tmp_path / "api.yaml").write_text(
        "openapi: 3.0.0\ninfo: {title: From YAML, version: '3'}\nservers: [{url: 'http://127.0.0.1:9'}]\n"
        "paths:\n  /hello:\n    get:\n      operationId: hello\n      responses: {'200': {description: ok}}\n")
    opened: list[str] = []

    @contextlib.asynccontextmanager
    async def lifespan(server: Server) -> AsyncIterator[str]:
        opened.append("in")
        yield "mine"

    server = Server.from_openapi(str(tmp_path / "api.yaml"), lifespan=lifespan)
    async with connect(server) as client:
        assert [t["name"] for t in await client.list_tools()] == ["hello"]
        assert server.lifespan_state == "mine"
        # Nothing listens on port 9: the tool answers an error, the server goes on.
        result = await client.call_tool("hello", {})
        assert result["isError"] is True and "could not be sent" in result["content"][0]["text"]
    assert opened == ["in"]
