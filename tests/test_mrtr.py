"""Multi Round-Trip Requests on the server (CHECKLIST section 5, 16-18)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pydantic
import pytest

from nimblemcp import Context, Server, StateOptions, ToolError
from nimblemcp.server._sealing import new_key
from nimblemcp.testing import TestClient, connect

ALL_CAPS = {"elicitation": {"form": {}, "url": {}}, "sampling": {}, "roots": {}}
NAME_SCHEMA = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}


class Login(pydantic.BaseModel):
    login: str
    age: int = 0


def make_server(**options: Any) -> Server:
    server = Server("mrtr", **options, state=StateOptions(keys=[new_key()]))

    @server.tool
    async def greet(ctx: Context) -> str:
        answer = await ctx.elicit("user_name", "Your name?", NAME_SCHEMA)
        if not answer.accepted:
            return f"no name ({answer.action})"
        return f"Hello, {answer.content['name']}!"

    @server.tool
    async def everything(ctx: Context) -> str:
        name, reply, roots = ctx.gather(
            ctx.elicit("user_name", "Your name?", NAME_SCHEMA),
            ctx.sample("greeting", ["Say hi"], 50),
            ctx.roots("client_roots"),
        )
        return f"{name.content['name']}|{reply['content']['text']}|{roots[0]['uri']}"

    @server.tool
    async def wizard(ctx: Context) -> str:
        ctx.state["started"] = ctx.state.get("started", 0) + 1
        step1 = await ctx.elicit("step1", "Name?", NAME_SCHEMA)
        ctx.state["name"] = step1.content["name"]
        step2 = await ctx.elicit("step2", "Colour?", {"type": "object", "properties": {"c": {"type": "string"}}})
        return f"{ctx.state['name']} likes {step2.content['c']} (runs: {ctx.state['started']})"

    @server.tool
    def sync_login(ctx: Context) -> str:
        answer = ctx.elicit("login", "GitHub login?", Login).result()
        assert isinstance(answer.data, Login)
        return f"{answer.data.login}:{answer.data.age}"

    @server.tool(one_time=True)
    async def pay(ctx: Context, amount: int) -> str:
        ok = await ctx.elicit("confirm", f"Pay {amount}?", {"type": "object", "properties": {}})
        return "paid" if ok.accepted else "cancelled"

    @server.tool
    async def visit(ctx: Context) -> str:
        answer = await ctx.elicit_url("auth", "Authorize at the provider", "https://example.com/auth")
        return f"url {answer.action}"

    @server.tool
    async def heavy(ctx: Context) -> str:
        if "partial" not in ctx.state:
            ctx.state["partial"] = 21
            ctx.checkpoint()
        return str(ctx.state["partial"] * 2)

    @server.prompt
    async def context_prompt(ctx: Context) -> str:
        answer = await ctx.elicit("user_context", "Context?", {"type": "object", "properties": {"context": {"type": "string"}}})
        return f"Context: {answer.content.get('context')}"

    @server.resource("test://needs-roots")
    async def rooted(ctx: Context) -> str:
        roots = await ctx.roots()
        return ",".join(r["uri"] for r in roots)

    return server


async def retry(client: TestClient, first: dict[str, Any], params: dict[str, Any], answers: dict[str, Any],
                method: str = "tools/call") -> dict[str, Any]:
    body = {**params, "inputResponses": answers}
    if "requestState" in first:
        body["requestState"] = first["requestState"]
    return await client.request(method, body, manual=True)


async def test_single_round_trip_elicitation() -> None:
    """MRTR-02/03, ELIC-02/04: input_required with a keyed elicitation, then complete."""
    async with connect(make_server(), capabilities=ALL_CAPS) as client:
        first = await client.call_tool("greet", {}, manual=True)
        assert first["resultType"] == "input_required"
        assert "ttlMs" not in first and "cacheScope" not in first  # MRTR-14
        request = first["inputRequests"]["user_name"]
        assert request == {"method": "elicitation/create",
                           "params": {"mode": "form", "message": "Your name?", "requestedSchema": NAME_SCHEMA}}
        done = await retry(client, first, {"name": "greet", "arguments": {}},
                           {"user_name": {"action": "accept", "content": {"name": "Ada"}}})
        assert done["resultType"] == "complete"
        assert done["content"][0]["text"] == "Hello, Ada!"


async def test_decline_and_cancel_reach_the_handler_as_values() -> None:
    """ELIC-11: decline/cancel are answers, not errors."""
    async with connect(make_server(), capabilities=ALL_CAPS) as client:
        first = await client.call_tool("greet", {}, manual=True)
        for action in ("decline", "cancel"):
            done = await retry(client, first, {"name": "greet"}, {"user_name": {"action": action}})
            assert done["content"][0]["text"] == f"no name ({action})"


async def test_several_requests_in_one_round() -> None:
    """MRTR-03: elicitation, sampling and roots asked together, answered together."""
    async with connect(make_server(), capabilities=ALL_CAPS) as client:
        first = await client.call_tool("everything", {}, manual=True)
        assert set(first["inputRequests"]) == {"user_name", "greeting", "client_roots"}
        assert first["inputRequests"]["greeting"]["params"]["maxTokens"] == 50
        assert first["inputRequests"]["client_roots"] == {"method": "roots/list"}
        # Only part of the answers: ask again for the rest (MRTR-11).
        partial = await retry(client, first, {"name": "everything"},
                              {"user_name": {"action": "accept", "content": {"name": "Ada"}}})
        assert partial["resultType"] == "input_required"
        assert set(partial["inputRequests"]) == {"greeting", "client_roots"}
        answers = {
            "user_name": {"action": "accept", "content": {"name": "Ada"}},
            "greeting": {"role": "assistant", "content": {"type": "text", "text": "hi!"}, "model": "m"},
            "client_roots": {"roots": [{"uri": "file:///work", "name": "work"}]},
            "unrelated": {"ignored": True},  # extra keys are ignored
        }
        done = await retry(client, partial, {"name": "everything"}, answers)
        assert done["content"][0]["text"] == "Ada|hi!|file:///work"


async def test_three_rounds_with_changing_state() -> None:
    """MRTR-10: state travels in requestState and changes each round."""
    async with connect(make_server(), capabilities=ALL_CAPS) as client:
        r1 = await client.call_tool("wizard", {}, manual=True)
        assert list(r1["inputRequests"]) == ["step1"]
        a1 = {"step1": {"action": "accept", "content": {"name": "Ada"}}}
        r2 = await retry(client, r1, {"name": "wizard"}, a1)
        assert list(r2["inputRequests"]) == ["step2"]
        assert r2["requestState"] != r1["requestState"]
        # The client sends only this round's answer: earlier ones ride in the state.
        r3 = await retry(client, r2, {"name": "wizard"},
                         {"step2": {"action": "accept", "content": {"c": "blue"}}})
        assert r3["content"][0]["text"] == "Ada likes blue (runs: 3)"


async def test_wrong_answer_asks_again() -> None:
    """MRTR-11 / ELIC-07: content not matching the schema brings a new input_required."""
    async with connect(make_server(), capabilities=ALL_CAPS) as client:
        first = await client.call_tool("greet", {}, manual=True)
        again = await retry(client, first, {"name": "greet"}, {"user_name": {"action": "accept", "content": {"name": 7}}})
        assert again["resultType"] == "input_required" and "user_name" in again["inputRequests"]


@pytest.mark.parametrize(
    "responses",
    [[1, 2], "x", {"user_name": "accept"}, {"user_name": {"action": "maybe"}}],
)
async def test_structurally_invalid_input_responses_are_invalid_params(responses: Any) -> None:
    """MRTR-11: malformed inputResponses get -32602, and the server keeps serving."""
    async with connect(make_server(), capabilities=ALL_CAPS) as client:
        ex = await client.exchange("tools/call", {"name": "greet", "inputResponses": responses})
        assert ex.error["code"] == -32602
        assert (await client.call_tool("greet", {}, manual=True))["resultType"] == "input_required"


async def test_pydantic_model_schema_in_a_sync_handler() -> None:
    async with connect(make_server(), capabilities=ALL_CAPS) as client:
        first = await client.call_tool("sync_login", {}, manual=True)
        schema = first["inputRequests"]["login"]["params"]["requestedSchema"]
        assert schema["properties"]["login"] == {"type": "string"} and schema["required"] == ["login"]
        done = await retry(client, first, {"name": "sync_login"},
                           {"login": {"action": "accept", "content": {"login": "octocat", "age": 3}}})
        assert done["content"][0]["text"] == "octocat:3"


async def test_tampered_state_is_rejected_with_a_fixed_message() -> None:
    """MRTR-12: integrity-protected state; a modified one is -32602."""
    async with connect(make_server(), capabilities=ALL_CAPS) as client:
        first = await client.call_tool("wizard", {}, manual=True)
        state = first["requestState"]
        tampered = state[:10] + ("A" if state[10] != "A" else "B") + state[11:]
        ex = await client.exchange("tools/call", {"name": "wizard", "requestState": tampered, "inputResponses": {}})
        assert ex.error == {"code": -32602, "message": "Invalid or expired requestState"}
        garbage = await client.exchange("tools/call", {"name": "wizard", "requestState": "not-a-state"})
        assert garbage.error["code"] == -32602


async def test_state_swapped_between_tools_or_arguments_is_rejected() -> None:
    """MRTR-13: state is bound to method, target and an argument digest."""
    async with connect(make_server(), capabilities=ALL_CAPS) as client:
        first = await client.call_tool("pay", {"amount": 5}, manual=True)
        other_tool = await client.exchange("tools/call", {"name": "wizard", "requestState": first["requestState"]})
        assert other_tool.error["code"] == -32602
        other_args = await client.exchange(
            "tools/call", {"name": "pay", "arguments": {"amount": 500}, "requestState": first["requestState"]}
        )
        assert other_args.error["code"] == -32602


async def test_state_from_another_server_key_is_rejected_but_rotation_works() -> None:
    """Key ring: the first key seals, every key opens; a foreign key is refused."""
    old, new = new_key(), new_key()
    before = make_server()
    before._state_keys = [old]
    after = make_server()
    after._state_keys = [new, old]
    stranger = make_server()
    async with connect(before, capabilities=ALL_CAPS) as c1:
        first = await c1.call_tool("greet", {}, manual=True)
    answers = {"user_name": {"action": "accept", "content": {"name": "Ada"}}}
    async with connect(after, capabilities=ALL_CAPS) as c2:
        done = await retry(c2, first, {"name": "greet"}, answers)
        assert done["content"][0]["text"] == "Hello, Ada!"
    async with connect(stranger, capabilities=ALL_CAPS) as c3:
        ex = await c3.exchange("tools/call", {"name": "greet", "requestState": first["requestState"], "inputResponses": answers})
        assert ex.error["code"] == -32602


async def test_expired_state_is_rejected(monkeypatch: pytest.MonkeyPatch) -> None:
    """MRTR-13: a short expiry is enforced."""
    async with connect(make_server(), capabilities=ALL_CAPS) as client:
        first = await client.call_tool("wizard", {}, manual=True)
        real = time.time
        monkeypatch.setattr(time, "time", lambda: real() + 3600)
        ex = await client.exchange("tools/call", {"name": "wizard", "requestState": first["requestState"]})
        assert ex.error["code"] == -32602


async def test_one_time_state_cannot_be_replayed() -> None:
    """MRTR-13: single use enforced server-side for one_time tools."""
    async with connect(make_server(), capabilities=ALL_CAPS) as client:
        first = await client.call_tool("pay", {"amount": 5}, manual=True)
        params = {"name": "pay", "arguments": {"amount": 5}}
        answers = {"confirm": {"action": "accept", "content": {}}}
        assert (await retry(client, first, params, answers))["content"][0]["text"] == "paid"
        replay = await client.exchange(
            "tools/call", {**params, "inputResponses": answers, "requestState": first["requestState"]}
        )
        assert replay.error["code"] == -32602


async def test_missing_capability_is_32021() -> None:
    """MRTR-04 / META-06: asking for an undeclared capability gets -32021."""
    async with connect(make_server(), capabilities={}) as client:
        ex = await client.exchange("tools/call", {"name": "greet"})
        assert ex.error["code"] == -32021
        assert ex.error["data"] == {"requiredCapabilities": {"elicitation": {}}}
    async with connect(make_server(), capabilities={"elicitation": {}}) as client:
        url = await client.exchange("tools/call", {"name": "visit"})  # form-only client
        assert url.error["data"] == {"requiredCapabilities": {"elicitation": {"url": {}}}}
        roots = await client.exchange("tools/call", {"name": "everything"})
        assert roots.error["code"] == -32021


async def test_url_mode_elicitation() -> None:
    """ELIC-02/04: URL mode; accept carries no content."""
    async with connect(make_server(), capabilities=ALL_CAPS) as client:
        first = await client.call_tool("visit", {}, manual=True)
        params = first["inputRequests"]["auth"]["params"]
        assert params == {"mode": "url", "message": "Authorize at the provider", "url": "https://example.com/auth"}
        done = await retry(client, first, {"name": "visit"}, {"auth": {"action": "accept"}})
        assert done["content"][0]["text"] == "url accept"


async def test_state_only_checkpoint_for_load_shedding() -> None:
    """MRTR-02: a requestState-only result; the immediate retry resumes."""
    async with connect(make_server(), capabilities=ALL_CAPS) as client:
        first = await client.call_tool("heavy", {}, manual=True)
        assert first["resultType"] == "input_required"
        assert "inputRequests" not in first and first["requestState"]
        done = await client.request("tools/call", {"name": "heavy", "requestState": first["requestState"]}, manual=True)
        assert done["content"][0]["text"] == "42"


async def test_prompts_and_resources_may_ask_too() -> None:
    """RT-04 / MRTR-01: prompts/get and resources/read may return input_required."""
    async with connect(make_server(), capabilities=ALL_CAPS) as client:
        first = await client.request("prompts/get", {"name": "context_prompt"}, manual=True)
        assert first["resultType"] == "input_required"
        done = await retry(client, first, {"name": "context_prompt"},
                           {"user_context": {"action": "accept", "content": {"context": "ctx"}}}, "prompts/get")
        assert done["messages"][0]["content"]["text"] == "Context: ctx"
        read = await client.read_resource("test://needs-roots", manual=True)
        assert read["resultType"] == "input_required" and "ttlMs" not in read
        done = await retry(client, read, {"uri": "test://needs-roots"},
                           {"roots": {"roots": [{"uri": "file:///a"}]}}, "resources/read")
        assert done["contents"][0]["text"] == "file:///a" and "ttlMs" in done


async def test_other_methods_never_return_input_required() -> None:
    """MRTR-01: a completion handler that asks for input is a server fault, not MRTR."""
    server = make_server()

    @server.completion
    def complete(ref: Any, name: str, value: str, context: Any) -> list[str]:
        raise __import__("nimblemcp.server._mrtr", fromlist=["InputRequired"]).InputRequired({})

    async with connect(server, capabilities=ALL_CAPS) as client:
        ex = await client.exchange("completion/complete", {"ref": {"type": "ref/prompt", "name": "context_prompt"},
                                                           "argument": {"name": "x", "value": ""}})
        assert ex.error["code"] == -32603


async def test_state_handles_lifecycle_and_expiry() -> None:
    """TOOL-14: opaque high-entropy handles, TTL, clear tool error when unknown/expired."""
    server = Server("handles", state=StateOptions(handle_ttl=0.05))

    @server.tool
    async def open_basket(ctx: Context) -> str:
        return await ctx.handles.create({"items": []})

    @server.tool
    async def add_item(ctx: Context, basket: str, item: str) -> list[str]:
        data = await ctx.handles.get(basket)
        data["items"].append(item)
        await ctx.handles.update(basket, data)
        return list(data["items"])

    async with connect(server) as client:
        handle = (await client.call_tool("open_basket", {}, manual=True))["content"][0]["text"]
        assert len(handle) >= 20
        added = await client.call_tool("add_item", {"basket": handle, "item": "apple"}, manual=True)
        assert added["structuredContent"] == {"result": ["apple"]}
        unknown = await client.call_tool("add_item", {"basket": "x" * 22, "item": "pear"}, manual=True)
        assert unknown["isError"] is True and "Unknown or expired handle" in unknown["content"][0]["text"]
        await asyncio.sleep(0.1)
        expired = await client.call_tool("add_item", {"basket": handle, "item": "pear"}, manual=True)
        assert expired["isError"] is True


async def test_handles_are_bound_to_the_subject() -> None:
    server = Server("handles")
    store = server.handles
    mine = await store.bind("alice").create({"secret": 1})
    assert await store.bind("alice").get(mine) == {"secret": 1}
    with pytest.raises(ToolError):
        await store.bind("mallory").get(mine)


async def test_framework_sheds_load_with_a_state_only_checkpoint() -> None:
    """MRTR-02: over `max_inflight`, MRTR methods get a requestState-only result; the
    retry carries the same state and answers, and completes once there is room."""
    server = make_server(max_inflight=1)
    gate = asyncio.Event()

    @server.tool
    async def slow() -> str:
        await gate.wait()
        return "slow done"

    async with connect(server, capabilities=ALL_CAPS) as client:
        first = await client.call_tool("wizard", {}, manual=True)
        busy = asyncio.create_task(client.call_tool("slow", {}, manual=True))
        await asyncio.sleep(0.01)
        answers = {"step1": {"action": "accept", "content": {"name": "Ada"}}}
        shed = await retry(client, first, {"name": "wizard"}, answers)
        assert shed["resultType"] == "input_required"
        assert "inputRequests" not in shed and shed["requestState"]
        listed = await client.list_tools()  # other methods are not shed
        assert listed
        gate.set()
        assert (await busy)["content"][0]["text"] == "slow done"
        resumed = await client.request("tools/call", {"name": "wizard", "requestState": shed["requestState"]}, manual=True)
        assert list(resumed["inputRequests"]) == ["step2"]  # step1's answer survived the shed
