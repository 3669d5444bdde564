"""Multi Round-Trip Requests on the server: asking the client for input (MRTR-01..17).

Handlers are re-entrant. `ctx.elicit(...)`, `ctx.sample(...)` and `ctx.roots(...)`
return an `Ask`; awaiting it (or `.result()` in sync code) gives the answer when the
retry's `inputResponses` holds a valid one, and otherwise ends the round by raising
`InputRequired`, which the dispatcher turns into an `input_required` result with a
sealed `requestState`. `ctx.gather(...)` asks several things in one round.
`InputRequired` derives from BaseException so a tool's `except Exception` cannot
swallow it. When a back channel gives up (a 2025-11-25 peer that never answers), the
handler re-runs and the unanswered ask raises `InputTimeout` where it was awaited. Must not import transports or the dispatcher.
"""

from __future__ import annotations

import warnings
from collections.abc import Awaitable, Callable, Generator, Sequence
from typing import Any, Literal, Protocol

from nimblemcp.errors import InvalidParams, MissingClientCapability

ElicitAction = Literal["accept", "decline", "cancel"]


class InputRequired(BaseException):
    """Ends this round: the client must answer `requests` (may be empty) and retry."""

    def __init__(self, requests: dict[str, dict[str, Any]]) -> None:
        super().__init__("input required")
        self.requests = requests


class ElicitResult:
    """The user's answer to an elicitation; decline and cancel are values, not errors."""

    __slots__ = ("action", "content", "data")

    def __init__(self, action: ElicitAction, content: dict[str, Any] | None, data: Any = None) -> None:
        self.action = action
        self.content = content
        self.data = data if data is not None else content  # a model instance when a model was asked

    @property
    def accepted(self) -> bool:
        return self.action == "accept"

    def __repr__(self) -> str:
        return f"ElicitResult({self.action!r}, {self.content!r})"


class Unanswered:
    """Stands in for an answer that never came (a back channel timed out): asking
    that question again raises `error` inside the handler, which may catch it."""

    __slots__ = ("error",)

    def __init__(self, error: Exception) -> None:
        self.error = error


class Ask:
    """One question for the client; await it (or call `.result()`) for the answer.

    An ask dropped unused while its handler returns normally was never asked: that
    warns (`RuntimeWarning`, see `warn_dropped`), like a coroutine never awaited.
    Dropped because another question or an error ended the round is fine: the handler
    runs again and asks it then."""

    __slots__ = ("_owner", "_responses", "_used", "key", "request")
    call = "ctx.ask"

    def __init__(self, key: str, request: dict[str, Any], responses: dict[str, Any]) -> None:
        if not isinstance(key, str) or not key:
            raise ValueError("input request keys must be non-empty strings")
        self.key = key
        self.request = request
        self._responses = responses
        self._used = False
        self._owner: Any = None  # the Context that made it, told if it is dropped unused

    def __del__(self) -> None:
        owner = self._owner
        if not self._used and owner is not None:
            owner._dropped = [*(owner._dropped or ()), f"{self.call}({self.key!r}, ...)"]

    def parse(self, value: dict[str, Any]) -> Any:
        """The answer from a response object; raise LookupError to ask again."""
        return value

    def answer(self) -> tuple[bool, Any]:
        self._used = True
        value = self._responses.get(self.key)
        if value is None:
            return False, None
        if type(value) is Unanswered:  # the peer never answered: the handler hears why
            raise value.error
        try:
            return True, self.parse(value)
        except LookupError:
            return False, None

    def result(self) -> Any:
        found, value = self.answer()
        if not found:
            raise InputRequired({self.key: self.request})
        return value

    def __await__(self) -> Generator[Any, None, Any]:
        return self.result()
        yield


class ElicitAsk(Ask):
    __slots__ = ("model", "schema")
    call = "ctx.elicit"

    def __init__(self, key: str, request: dict[str, Any], responses: dict[str, Any],
                 schema: dict[str, Any] | None, model: Any) -> None:
        super().__init__(key, request, responses)
        self.schema = schema
        self.model = model

    def parse(self, value: dict[str, Any]) -> ElicitResult:
        action = value.get("action")
        if action not in ("accept", "decline", "cancel"):
            raise InvalidParams(f"inputResponses.{self.key}: action must be accept, decline or cancel")
        content = value.get("content")
        if action != "accept" or self.schema is None:
            return ElicitResult(action, content if isinstance(content, dict) else None)  # type: ignore[arg-type]
        if not isinstance(content, dict):
            raise LookupError("accepted form without content")
        if self.model is not None:
            import pydantic

            try:
                data = self.model.model_validate(content)
            except pydantic.ValidationError:
                raise LookupError("content does not match the model") from None
            return ElicitResult("accept", content, data)  # type: ignore[arg-type]
        from nimblemcp.server._refs import confined_validator

        if not confined_validator(self.schema, "elicitation schema").is_valid(content):
            raise LookupError("content does not match the schema")
        return ElicitResult("accept", content)  # type: ignore[arg-type]


class SampleResult(dict[str, Any]):
    """The client's LLM answer (a CreateMessageResult): the wire dict as it came, with
    typed views. `content` is one block, or a list of blocks when the model called tools."""

    __slots__ = ()

    @property
    def role(self) -> Literal["user", "assistant"]:
        role: Literal["user", "assistant"] = self["role"]
        return role

    @property
    def content(self) -> Any:
        return self["content"]

    @property
    def blocks(self) -> list[dict[str, Any]]:
        """`content` as a list of blocks."""
        content = self["content"]
        return list(content) if isinstance(content, list) else [content]

    @property
    def text(self) -> str:
        """The text of the answer's text blocks, joined ("" when there are none)."""
        return "".join(b.get("text", "") for b in self.blocks
                       if isinstance(b, dict) and b.get("type") == "text")

    @property
    def model(self) -> str | None:
        model = self.get("model")
        return model if isinstance(model, str) else None

    @property
    def stop_reason(self) -> str | None:
        reason = self.get("stopReason")
        return reason if isinstance(reason, str) else None

    def __repr__(self) -> str:
        return f"SampleResult({dict(self)!r})"


class SampleAsk(Ask):
    __slots__ = ()
    call = "ctx.sample"

    def parse(self, value: dict[str, Any]) -> SampleResult:
        if "content" not in value or value.get("role") not in ("user", "assistant"):
            raise LookupError("not a CreateMessageResult")
        return SampleResult(value)

    def __await__(self) -> Generator[Any, None, SampleResult]:
        return self.result()  # type: ignore[no-any-return]
        yield


class RootsAsk(Ask):
    __slots__ = ()
    call = "ctx.roots"

    def parse(self, value: dict[str, Any]) -> list[dict[str, Any]]:
        roots = value.get("roots")
        if not isinstance(roots, list):
            raise LookupError("not a ListRootsResult")
        return [r for r in roots if isinstance(r, dict) and isinstance(r.get("uri"), str)]  # type: ignore[misc]


def gather(*asks: Ask) -> list[Any]:
    """Answers to several asks, or one round asking every unanswered one at once."""
    missing: dict[str, dict[str, Any]] = {}
    values: list[Any] = []
    for ask in asks:
        found, value = ask.answer()
        if not found:
            missing[ask.key] = ask.request
        values.append(value)
    if missing:
        raise InputRequired(missing)
    return values


def warn_dropped(dropped: list[str]) -> None:
    """A handler returned normally having dropped questions it never asked."""
    for call in dropped:
        warnings.warn(
            f"{call} was created but never awaited, so the question was never asked: write"
            f" `await {call}` (or `{call}.result()` in sync code), or pass it to `ctx.gather(...)`",
            RuntimeWarning, stacklevel=2,
        )


def _require(caps: dict[str, Any], name: str, sub: str | None = None) -> None:
    """MRTR-04 / META-06: never ask for what this request's client cannot answer."""
    cap = caps.get(name)
    if not isinstance(cap, dict) or (sub is not None and not isinstance(cap.get(sub), dict)):  # type: ignore[union-attr]
        raise MissingClientCapability({name: {sub: {}} if sub else {}})


def elicit_schema(schema: Any) -> tuple[dict[str, Any] | None, Any]:
    """(JSON schema, pydantic model or None) from a dict schema or a BaseModel class."""
    if schema is None or isinstance(schema, dict):
        return schema, None  # type: ignore[return-value]
    json_schema = getattr(schema, "model_json_schema", None)
    if json_schema is None:
        raise TypeError("schema must be a JSON Schema dict or a pydantic model class")
    from nimblemcp.server._refs import inline_refs

    out = inline_refs(json_schema())
    out.pop("title", None)
    for prop in out.get("properties", {}).values():
        if isinstance(prop, dict):
            prop.pop("title", None)  # type: ignore[union-attr]
    return out, schema


def make_elicit(key: str, message: str, schema: Any, responses: dict[str, Any],
                caps: dict[str, Any]) -> ElicitAsk:
    _require(caps, "elicitation")
    elic = caps["elicitation"]
    if elic and "form" not in elic:  # {} means form-only; otherwise form must be listed
        raise MissingClientCapability({"elicitation": {"form": {}}})
    json_schema, model = elicit_schema(schema if schema is not None else {"type": "object", "properties": {}})
    if model is None and json_schema is not None:
        from nimblemcp.server._refs import check_refs, dialect_of

        dialect_of(json_schema, "elicitation schema")  # SCHEMA-01: an unknown dialect is named
        check_refs(json_schema, "elicitation schema")  # SCHEMA-02: nothing is ever fetched
    params = {"mode": "form", "message": message, "requestedSchema": json_schema}
    return ElicitAsk(key, {"method": "elicitation/create", "params": params}, responses, json_schema, model)


def make_elicit_url(key: str, message: str, url: str, responses: dict[str, Any],
                    caps: dict[str, Any]) -> ElicitAsk:
    _require(caps, "elicitation", "url")
    params = {"mode": "url", "message": message, "url": url}
    return ElicitAsk(key, {"method": "elicitation/create", "params": params}, responses, None, None)


def make_sample(key: str, messages: Sequence[Any], max_tokens: int, responses: dict[str, Any],
                caps: dict[str, Any], extra: dict[str, Any]) -> SampleAsk:
    from nimblemcp.content import text

    if extra.get("tools") or extra.get("toolChoice"):
        _require(caps, "sampling", "tools")
    else:
        _require(caps, "sampling")
    wire = [
        {"role": "user", "content": text(m)} if isinstance(m, str) else m for m in messages
    ]
    params: dict[str, Any] = {"messages": wire, "maxTokens": max_tokens}
    params.update({k: v for k, v in extra.items() if v is not None})
    return SampleAsk(key, {"method": "sampling/createMessage", "params": params}, responses)


def make_roots(key: str, responses: dict[str, Any], caps: dict[str, Any]) -> RootsAsk:
    _require(caps, "roots")
    return RootsAsk(key, {"method": "roots/list"}, responses)


def check_responses(value: Any) -> dict[str, Any]:
    """`inputResponses` must be an object of objects (MRTR-11); anything else is -32602."""
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(isinstance(v, dict) for v in value.values()):  # type: ignore[union-attr]
        raise InvalidParams("inputResponses must be an object whose values are objects")
    return value  # type: ignore[return-value]


MAX_ROUNDS = 32

Asker = Callable[[dict[str, dict[str, Any]]], Awaitable[dict[str, Any]]]


class Answered(Protocol):
    """Where a re-run handler finds the answers so far (the request's Context)."""

    _responses: dict[str, Any]


async def run_answering(
    run: Callable[[], Awaitable[dict[str, Any]]], ctx: Answered, ask: Asker
) -> dict[str, Any]:
    """Re-run a re-entrant handler, sending each round's questions through `ask`
    (a legacy client's back channel, or a task's `inputRequests`) until it finishes."""
    from nimblemcp.errors import InputTimeout, InternalError

    for _ in range(MAX_ROUNDS):
        try:
            return await run()
        except InputRequired as asked:
            if asked.requests:
                try:
                    answers: dict[str, Any] = await ask(asked.requests)
                except InputTimeout as exc:
                    # Re-run once more: the ask raises InputTimeout inside the handler,
                    # which may catch it (and, uncaught, it fails the request, -32603).
                    answers = {key: Unanswered(exc) for key in asked.requests}
                ctx._responses = {**ctx._responses, **answers}
    raise InternalError("The handler kept asking for input")
