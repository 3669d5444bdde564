"""The one per-request Context a handler may ask for by annotating a parameter.

Built once per request by the dispatcher from the request's own `_meta` (BASE-08:
nothing is remembered between requests). Emitting progress or logs is non-blocking
and safe from sync handlers running in worker threads. Must not import transports.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Generator, Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, TypeVar

from nimblemcp.server import _mrtr
from nimblemcp.types._meta import LOG_LEVELS, log_rank

_running_loop = asyncio._get_running_loop  # the C getter: None off the loop's thread

if TYPE_CHECKING:
    from collections.abc import Sequence

    from nimblemcp._port import CloseStream, Prepared
    from nimblemcp.server._handles import BoundHandles, HandleStore
    from nimblemcp.types._meta import RequestMeta

Emit = Callable[[dict[str, Any]], None]
_AskT = TypeVar("_AskT", bound=_mrtr.Ask)


class _Sent:
    """What emitting methods return: ignorable, and also awaitable for async callers."""

    __slots__ = ()

    def __await__(self) -> Generator[Any, None, None]:
        return
        yield

    def __bool__(self) -> bool:
        return True


_SENT = _Sent()
_NO_HEADERS: Mapping[str, str] = MappingProxyType({})


class BecomeTask(BaseException):
    """Raised by `ctx.as_task()`: the handler asked to continue as a task from here on
    (the tasks extension, `_tasks`, catches it)."""


class Context:
    """What one request told the server, and the ways a handler can talk back.

    Built for every request, so it holds only references (the prepared request, the
    transport's RequestIO, the loop); what a handler may read is derived from them on
    demand, and MRTR/task state (`state`, `task_mode`, the answers) exists only once
    something sets it."""

    __slots__ = (
        "_answers",
        "_cancelled",
        "_done",
        "_dropped",
        "_emit",
        "_io",
        "_last_progress",
        "_loop",
        "_req",
        "_state",
        "_task_mode",
        "server",
    )
    # Set only when used (reading them unset raises AttributeError): see the properties.
    _answers: dict[str, Any]
    _state: dict[str, Any]
    _task_mode: str | None
    _last_progress: float

    # The `nimblemcp.Server` whose handler runs (for a mounted entry, the server it
    # was registered on): what `lifespan` and `handles` are read from.
    server: Any

    def __init__(
        self, server: Any, request: Prepared, io: Any, loop: asyncio.AbstractEventLoop | None = None
    ) -> None:
        self.server = server
        self._req = request  # id, method, params and the `_meta` fields (`nimblemcp._port.Prepared`)
        self._io = io  # the transport's RequestIO: subject, headers and principal, read on demand
        self._emit: Any = io  # where notifications go; None once muted (a request turned task)
        self._loop = asyncio.get_running_loop() if loop is None else loop  # the caller's running loop
        self._cancelled = False
        self._done = False
        self._dropped: list[str] | None = None

    # -- what the request said ------------------------------------------------------

    @property
    def request_id(self) -> str | int:
        return self._req.id

    @property
    def method(self) -> str:
        return self._req.method

    @property
    def params(self) -> dict[str, Any]:
        return self._req.params

    @property
    def _meta(self) -> RequestMeta:
        """The request's `_meta` fields (`version`, `client_capabilities`, ...)."""
        return self._req.meta

    @property
    def subject(self) -> str | None:
        """The authenticated subject of the request (None without authentication)."""
        return self._io.subject  # type: ignore[no-any-return]

    @property
    def state(self) -> dict[str, Any]:
        """Small JSON-able handler state that survives MRTR rounds inside the sealed
        requestState (MRTR-10): write it before asking, read it on the retry."""
        try:
            return self._state
        except AttributeError:
            state: dict[str, Any] = {}
            self._state = state
            return state

    @state.setter
    def state(self, value: dict[str, Any]) -> None:
        self._state = value

    @property
    def task_mode(self) -> str | None:
        """Tasks extension: None (not a task tool or client), "deferred" (as_task()
        escalates), "running" (already a background task)."""
        try:
            return self._task_mode
        except AttributeError:
            return None

    @task_mode.setter
    def task_mode(self, value: str | None) -> None:
        self._task_mode = value

    @property
    def _responses(self) -> dict[str, Any]:
        """The client's answers to this request's input requests (MRTR), by key."""
        try:
            return self._answers
        except AttributeError:
            answers: dict[str, Any] = {}
            self._answers = answers
            return answers

    @_responses.setter
    def _responses(self, value: dict[str, Any]) -> None:
        self._answers = value

    @property
    def protocol_version(self) -> str:
        return self._meta.version

    @property
    def client_capabilities(self) -> dict[str, Any]:
        return self._meta.client_capabilities

    @property
    def client_info(self) -> dict[str, Any] | None:
        """Self-reported and unverified: for display and logs only (META-04)."""
        return self._meta.client_info

    @property
    def progress_token(self) -> str | int | None:
        return self._meta.progress_token

    @property
    def log_level(self) -> str | None:
        rank = self._meta.log_level
        return None if rank is None else LOG_LEVELS[rank]

    @property
    def lifespan(self) -> Any:
        """What the server's lifespan yielded (see `Server(lifespan=...)`)."""
        return self.server.lifespan_state

    @property
    def headers(self) -> Mapping[str, str]:
        """The HTTP request's headers (names lowercased, decoded on first use); empty
        on a transport without headers (stdio, in-memory)."""
        headers = getattr(self._io, "headers", None)  # optional on a RequestIO
        return headers if headers is not None else _NO_HEADERS

    @property
    def principal(self) -> Any:
        """The verified access token of an authenticated HTTP request (`subject`,
        `scopes`, `claims`...), or None."""
        return getattr(self._io, "auth", None)  # optional on a RequestIO

    @property
    def meta(self) -> dict[str, Any]:
        """The request's raw `_meta` (trace context and custom keys included)."""
        return self._meta.raw

    # -- cancellation -----------------------------------------------------------------

    @property
    def cancelled(self) -> bool:
        """True once the client abandoned this request; sync handlers should poll it."""
        return self._cancelled

    def _cancel(self) -> None:
        self._cancelled = True

    # -- talking back on the request's own stream -----------------------------------------

    def _send(self, message: dict[str, Any]) -> None:
        io = self._emit
        if io is None or self._done or self._cancelled:
            return
        if _running_loop() is self._loop:  # on the loop's own thread
            io.emit(message)
        else:
            self._loop.call_soon_threadsafe(self._send, message)

    def close_sse_stream(self) -> bool:
        """End this request's SSE stream now, while the handler goes on: the client
        reconnects after the server's `retry` delay with `Last-Event-ID` and receives
        what follows there, the result included (2025-11-25 HTTP sessions; SEP-1699).
        Lets a long call free its connection, e.g. behind a proxy with a read timeout.
        False (and nothing happens) where the transport has no resumable stream."""
        close: CloseStream | None = getattr(self._io, "close_stream", None)
        if close is None or self._done:
            return False
        if _running_loop() is self._loop:
            return close()
        self._loop.call_soon_threadsafe(close)
        return True

    def report_progress(
        self, progress: float, total: float | None = None, message: str | None = None
    ) -> _Sent:
        """Send `notifications/progress` if the request asked for it (PROG-02/03).

        Values that do not increase are dropped: the spec requires strictly
        increasing progress. Works with or without `await`.
        """
        token = self._meta.progress_token
        if token is None:
            return _SENT
        last = getattr(self, "_last_progress", None)  # unset until the first report
        if last is not None and progress <= last:
            return _SENT
        self._last_progress = progress
        params: dict[str, Any] = {"progressToken": token, "progress": progress}
        if total is not None:
            params["total"] = total
        if message is not None:
            params["message"] = message
        self._send({"jsonrpc": "2.0", "method": "notifications/progress", "params": params})
        return _SENT

    def log(self, level: str, data: Any, logger: str | None = None) -> _Sent:
        """Send `notifications/message` only when the request opted in at or below
        `level` (LOG-02/03). Never put secrets or personal data here (LOG-06)."""
        gate = self._meta.log_level
        if gate is None or log_rank(level) < gate:
            return _SENT
        params: dict[str, Any] = {"level": level, "data": data}
        if logger is not None:
            params["logger"] = logger
        self._send({"jsonrpc": "2.0", "method": "notifications/message", "params": params})
        return _SENT

    def debug(self, data: Any, logger: str | None = None) -> _Sent:
        return self.log("debug", data, logger)

    def info(self, data: Any, logger: str | None = None) -> _Sent:
        return self.log("info", data, logger)

    def warning(self, data: Any, logger: str | None = None) -> _Sent:
        return self.log("warning", data, logger)

    def error(self, data: Any, logger: str | None = None) -> _Sent:
        return self.log("error", data, logger)

    # -- asking the client for input (MRTR) ---------------------------------------------

    def supports(self, capability: str, sub: str | None = None) -> bool:
        """Whether THIS request declared a client capability (META-05)."""
        cap = self._meta.client_capabilities.get(capability)
        return isinstance(cap, dict) and (sub is None or isinstance(cap.get(sub), dict))  # type: ignore[union-attr]

    def elicit(self, key: str, message: str, schema: Any = None) -> _mrtr.ElicitAsk:
        """Ask the user to fill a form (`schema`: a flat JSON Schema or a pydantic model).

        `await` it for an `ElicitResult` (`.accepted`, `.content`, `.data`); sync code
        calls `.result()`. Without an answer yet, the round ends with input_required.
        """
        return self._own(_mrtr.make_elicit(key, message, schema, self._responses,
                                           self._meta.client_capabilities))

    def elicit_url(self, key: str, message: str, url: str) -> _mrtr.ElicitAsk:
        """Ask the user to visit `url` (out-of-band flows; never for secrets in forms)."""
        return self._own(_mrtr.make_elicit_url(key, message, url, self._responses,
                                               self._meta.client_capabilities))

    def sample(
        self, key: str, messages: Sequence[Any], max_tokens: int = 1000, *,
        system_prompt: str | None = None, temperature: float | None = None,
        model_preferences: dict[str, Any] | None = None,
        stop_sequences: list[str] | None = None,
        tools: list[dict[str, Any]] | None = None, tool_choice: dict[str, Any] | None = None,
    ) -> _mrtr.SampleAsk:
        """Ask the client's LLM; strings in `messages` become user text messages."""
        extra = {
            "systemPrompt": system_prompt, "temperature": temperature,
            "modelPreferences": model_preferences, "stopSequences": stop_sequences,
            "tools": tools, "toolChoice": tool_choice,
        }
        return self._own(_mrtr.make_sample(key, messages, max_tokens, self._responses,
                                           self._meta.client_capabilities, extra))

    def roots(self, key: str = "roots") -> _mrtr.RootsAsk:
        """Ask for the client's roots (a list of `{"uri": "file://...", "name"?}`)."""
        return self._own(_mrtr.make_roots(key, self._responses, self._meta.client_capabilities))

    def _own(self, ask: _AskT) -> _AskT:
        ask._owner = self  # a dropped ask reports to its context (see _mrtr.Ask)
        return ask

    def gather(self, *asks: _mrtr.Ask) -> list[Any]:
        """Answers to several asks, or one round that asks all missing ones together."""
        return _mrtr.gather(*asks)

    def checkpoint(self) -> None:
        """End this round with a state-only input_required; the client retries at once
        and the handler resumes from `ctx.state` (load shedding, MRTR-02)."""
        raise _mrtr.InputRequired({})

    def as_task(self) -> _Sent:
        """Continue as a background task from here (tools with `defer_task=True`).

        Questions asked before this call go through the normal MRTR rounds; the
        client then gets a CreateTaskResult and the handler re-runs in the task with
        those answers. A no-op when the client did not declare the tasks extension
        (the call just goes on synchronously) or inside the task."""
        if self.task_mode == "deferred":
            raise BecomeTask()
        return _SENT

    @property
    def handles(self) -> BoundHandles:
        """State handles for this request's subject (see `nimblemcp.server._handles`)."""
        handles: HandleStore = self.server.handles
        return handles.bind(self.subject)


# -- which parameter takes the Context -------------------------------------------------
# One answer everywhere (tools, prompts, resources, templates, providers): a parameter
# annotated `Context`, a subclass of it, or the name `Context` in a postponed (string)
# annotation, resolved in the function's module first (a class of the module's own
# named Context is that class), else as this one (imported for type checking only).


def type_hints(fn: Callable[..., Any]) -> dict[str, Any]:
    """`fn`'s type hints, `Annotated` extras kept, with the name `Context` resolving as
    said above; raises like `typing.get_type_hints` on any other unresolvable name."""
    import typing

    known = getattr(fn, "__globals__", None) or {}
    return typing.get_type_hints(
        fn, localns=None if "Context" in known else {"Context": Context}, include_extras=True)


def is_context(hint: Any) -> bool:
    """Whether a parameter annotated `hint` takes the Context (`hint` as `type_hints`
    gives it; the bare string when the annotations could not be resolved at all)."""
    return hint == "Context" or (isinstance(hint, type) and issubclass(hint, Context))


def context_param(fn: Callable[..., Any]) -> str | None:
    """The name of the parameter that takes the Context, if any."""
    import inspect

    try:
        hints = type_hints(fn)
    except Exception:  # another name is unresolvable: the raw annotations
        hints = {}
    for p in inspect.signature(fn).parameters.values():
        if is_context(hints.get(p.name, p.annotation)):
            return p.name
    return None
