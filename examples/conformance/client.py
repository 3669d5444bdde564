"""The conformance client: what the official suite starts once per client scenario.

    python examples/conformance/client.py <server-url>

Reads MCP_CONFORMANCE_SCENARIO, MCP_CONFORMANCE_PROTOCOL_VERSION and (for some
scenarios) MCP_CONFORMANCE_CONTEXT, then drives `nimblemcp.client.Client`, our public
client API, the way that scenario expects. The verdict comes from what the mock server
observed; this program just has to behave and exit on its own. For 2025-11-25 the
same Client falls back to the `initialize` handshake on its own (mode "auto").
auth/* scenarios run `nimblemcp.client.auth.OAuth` with a non-interactive
`on_authorize`: it GETs the authorization URL and returns the redirect's `Location`
(the suite's mock authorization server approves at once), uses the context's
pre-registered credentials when given, and offers the suite's Client ID Metadata
Document URL. The extension scenarios pick the matching `OAuth` option: a
`private_key_jwt` signing key (client-credentials-jwt), `JwtBearer` with the
context's workload token (wif-jwt-bearer), `EnterpriseManaged` with the context's ID
token and IdP (enterprise-managed-authorization), `dpop=True` (dpop, dpop-nonce).
Scenarios that expect a refusal end with exit status 1.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import sys
from collections.abc import Callable, Coroutine
from typing import Any

import httpx

from nimblemcp.client import Client
from nimblemcp.client.auth import (
    EnterpriseManaged,
    Grant,
    JwtBearer,
    OAuth,
    PreRegistered,
    SigningKey,
)
from nimblemcp.errors import McpError

log = logging.getLogger("conformance-client")

CLIENT_INFO = {"name": "nimblemcp-conformance-client", "version": "0.1.0"}


def accept_with_defaults(params: dict[str, Any]) -> dict[str, Any]:
    """Accept every form; the Client fills schema defaults for omitted fields."""
    schema = params.get("requestedSchema") or {}
    content: dict[str, Any] = {}
    for name, prop in (schema.get("properties") or {}).items():
        if "default" in prop:
            continue
        kind = prop.get("type")
        if kind == "boolean":
            content[name] = True
        elif kind == "string":
            content[name] = (prop.get("enum") or ["conformance"])[0]
        elif kind in ("integer", "number"):
            content[name] = prop.get("minimum", 1)
    return {"action": "accept", "content": content}


def sample(params: dict[str, Any]) -> dict[str, Any]:
    return {"role": "assistant", "content": {"type": "text", "text": "Paris"},
            "model": "conformance-model", "stopReason": "endTurn"}


def roots(params: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"uri": "file:///tmp/conformance", "name": "conformance"}]


def make_client(url: str, *, callbacks: bool = True) -> Client:
    extra: dict[str, Any] = {}
    if callbacks:
        extra = {"on_elicit": accept_with_defaults, "on_sample": sample, "on_roots": roots}
    return Client(url, client_info=CLIENT_INFO, timeout=20.0, **extra)


async def tools_call(url: str, context: dict[str, Any]) -> None:
    async with make_client(url) as client:
        await client.list_tools()
        result = await client.call_tool("add_numbers", {"a": 5, "b": 3})
        log.info("add_numbers -> %s", result.get("content"))


async def initialize(url: str, context: dict[str, Any]) -> None:
    async with make_client(url) as client:
        tools = await client.list_tools()
        log.info("era %s, version %s, %d tools", client.era, client.version, len(tools))


async def call_every_tool(url: str, context: dict[str, Any]) -> None:
    """sse-retry and elicitation-sep1034-client-defaults: call what the server lists."""
    async with make_client(url) as client:
        for tool in await client.list_tools():
            result = await client.call_tool(tool["name"], {})
            log.info("%s -> %s", tool["name"], result.get("content"))


async def request_metadata(url: str, context: dict[str, Any]) -> None:
    async with make_client(url) as client:
        await client.discover(cache=False)
        await client.list_tools(cache=False)


async def request_state(url: str, context: dict[str, Any]) -> None:
    async with make_client(url) as client:
        names = [t["name"] for t in await client.list_tools()]
        for name in names:
            try:
                result = await client.call_tool(name, {})
                log.info("%s -> %s", name, result.get("content"))
            except McpError as exc:
                log.warning("%s failed: %s", name, exc)


async def standard_headers(url: str, context: dict[str, Any]) -> None:
    async with make_client(url) as client:
        for tool in await client.list_tools():
            await client.call_tool(tool["name"], {})
        for resource in await client.list_resources():
            await client.read_resource(resource["uri"])
        for prompt in await client.list_prompts():
            await client.get_prompt(prompt["name"], {})


async def custom_headers(url: str, context: dict[str, Any]) -> None:
    calls = context.get("toolCalls") or []
    async with make_client(url) as client:
        tools = {t["name"] for t in await client.list_tools()}
        for call in calls:
            if call.get("name") in tools:
                await client.call_tool(call["name"], call.get("arguments") or {})


async def invalid_tool_headers(url: str, context: dict[str, Any]) -> None:
    async with make_client(url) as client:
        for tool in await client.list_tools():  # invalid definitions are already dropped
            args = {name: _sample_value(prop) for name, prop in
                    ((tool.get("inputSchema") or {}).get("properties") or {}).items()}
            await client.call_tool(tool["name"], args)


def _sample_value(prop: dict[str, Any]) -> Any:
    kind = prop.get("type")
    return {"string": "us-west1", "integer": 1, "boolean": True, "number": 1.5}.get(
        kind if isinstance(kind, str) else "string", "x")


SCHEMA_TOOL = "json_schema_2020_12_tool"
ECHO_TOOL = "json_schema_echo"


async def schema_preservation(url: str, context: dict[str, Any]) -> None:
    """Echo the focal tool's inputSchema back exactly as the Client received it."""
    async with make_client(url) as client:
        tools = {t["name"]: t for t in await client.list_tools()}
        if SCHEMA_TOOL in tools and ECHO_TOOL in tools:
            await client.call_tool(ECHO_TOOL, {"schema": tools[SCHEMA_TOOL]["inputSchema"]})


async def ref_no_deref(url: str, context: dict[str, Any]) -> None:
    async with make_client(url) as client:
        tools = await client.list_tools()
        log.info("listed %d tools without dereferencing remote $refs", len(tools))


CIMD_URL = "https://conformance-test.local/client-metadata.json"


async def follow_redirect(url: str) -> str:
    """The user agent's part, headless: the mock server redirects at once."""
    async with httpx.AsyncClient(follow_redirects=False, timeout=10.0) as http:
        response = await http.get(url)
    location = response.headers.get("location")
    if response.status_code not in (301, 302, 303, 307, 308) or not location:
        raise McpError(f"the authorization endpoint did not redirect (HTTP {response.status_code})")
    return location


async def oauth_flow(url: str, context: dict[str, Any]) -> None:
    """auth/*: authorize on the first 401, then list and call every tool."""
    scenario = os.environ.get("MCP_CONFORMANCE_SCENARIO", "")
    pre: tuple[PreRegistered, ...] = ()
    if isinstance(context.get("client_id"), str):
        key = SigningKey.from_pem(context["private_key_pem"], context.get("signing_algorithm")) \
            if isinstance(context.get("private_key_pem"), str) else None
        pre = (PreRegistered(context["client_id"], context.get("client_secret"),
                             context.get("issuer"), signing_key=key),)
    grant: Grant | None = None
    if scenario == "auth/wif-jwt-bearer":
        grant = JwtBearer(lambda: str(context["valid_jwt"]))
    elif scenario == "auth/enterprise-managed-authorization":
        grant = EnterpriseManaged(
            id_token=lambda: str(context["idp_id_token"]),
            idp_client_id=context["idp_client_id"],
            idp_token_endpoint=context.get("idp_token_endpoint"),
            idp_issuer=context.get("idp_issuer"))
    grant_type = "client_credentials" if "client-credentials" in scenario else "authorization_code"
    auth = OAuth(on_authorize=follow_redirect, client_name="nimblemcp-conformance-client",
                 client_metadata_url=CIMD_URL, pre_registered=pre, grant_type=grant_type,
                 grant=grant, dpop=scenario.startswith("auth/dpop"))
    async with Client(url, client_info=CLIENT_INFO, timeout=20.0, auth=auth) as client:
        for tool in await client.list_tools():
            result = await client.call_tool(tool["name"], {})
            log.info("%s -> %s", tool["name"], result.get("content"))


SCENARIOS: dict[str, Callable[[str, dict[str, Any]], Coroutine[Any, Any, None]]] = {
    "tools_call": tools_call,
    "initialize": initialize,
    "sse-retry": call_every_tool,
    "elicitation-sep1034-client-defaults": call_every_tool,
    "request-metadata": request_metadata,
    "sep-2322-client-request-state": request_state,
    "http-standard-headers": standard_headers,
    "http-custom-headers": custom_headers,
    "http-invalid-tool-headers": invalid_tool_headers,
    "json-schema-ref-no-deref": ref_no_deref,
    "json-schema-2020-12-preservation": schema_preservation,
}


def main(argv: list[str]) -> int:
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(levelname)s %(name)s: %(message)s")
    if len(argv) < 2:
        print("usage: client.py <server-url>", file=sys.stderr)
        return 2
    url = argv[-1]
    scenario = os.environ.get("MCP_CONFORMANCE_SCENARIO", "")
    version = os.environ.get("MCP_CONFORMANCE_PROTOCOL_VERSION", "2026-07-28")
    context = json.loads(os.environ.get("MCP_CONFORMANCE_CONTEXT") or "{}")
    log.info("scenario %s at protocol version %s", scenario, version)
    run = SCENARIOS.get(scenario) or (oauth_flow if scenario.startswith("auth/") else None)
    if run is None:
        print(f"scenario {scenario!r} is not supported by this client yet", file=sys.stderr)
        return 3
    try:
        asyncio.run(run(url, context))
    except McpError as exc:
        log.error("scenario %s failed: %s: %s", scenario, type(exc).__name__, exc)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
