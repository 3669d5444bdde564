"""The option groups are frozen, slotted dataclasses: their keywords and defaults,
immutability, equality, hashing, repr, `dataclasses.replace`, pickling."""

from __future__ import annotations

import copy
import dataclasses
import inspect
import pickle
from typing import Any

import pytest

from nimblemcp import (
    Backends,
    LegacyOptions,
    ListenOptions,
    ServerSettings,
    StateOptions,
    TaskOptions,
    ToolOptions,
)
from nimblemcp.backends.memory import MemoryStore

DEFAULTS: dict[type, dict[str, Any]] = {
    StateOptions: {"keys": None, "ttl": 600.0, "one_time": False, "audience": None, "handle_ttl": 3600.0,
                   "max_state_size": 65_536, "handles_per_caller": 1_000,
                   "handle_bytes_per_caller": 16 * 1024 * 1024, "max_handle_size": 1024 * 1024},
    Backends: {"store": None, "bus": None},
    ListenOptions: {"enabled": True, "queue": 256, "max_uris": 1_000, "max_filter_chars": 256 * 1024,
                    "handover": 5.0},
    ToolOptions: {"mask_errors": True, "validate_output": True},
    TaskOptions: {"ttl": 3600.0, "poll_interval": 0.5, "heartbeat": 2.0, "lease": 10.0},
    ServerSettings: {"state_keys": None, "redis_url": None},
    LegacyOptions: {"request_timeout": 300.0, "idle_timeout": 1800.0, "max_sessions": 10_000},
}
GROUPS = list(DEFAULTS)


@pytest.mark.parametrize("cls", GROUPS, ids=lambda c: c.__name__)
def test_defaults_and_field_order(cls: type) -> None:
    made = cls()
    assert [f.name for f in dataclasses.fields(made)] == list(DEFAULTS[cls])
    assert {name: getattr(made, name) for name in DEFAULTS[cls]} == DEFAULTS[cls]
    assert list(inspect.signature(cls).parameters) == list(DEFAULTS[cls])
    assert dataclasses.is_dataclass(made)
    assert cls.__match_args__ == tuple(DEFAULTS[cls])  # type: ignore[attr-defined]


@pytest.mark.parametrize("cls", GROUPS, ids=lambda c: c.__name__)
def test_frozen_and_slotted(cls: type) -> None:
    made = cls()
    first = next(iter(DEFAULTS[cls]))
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(made, first, 1)
    with pytest.raises(dataclasses.FrozenInstanceError):
        delattr(made, first)
    with pytest.raises((AttributeError, TypeError)):
        made.not_a_field = 1
    assert not hasattr(made, "__dict__")


@pytest.mark.parametrize("cls", GROUPS, ids=lambda c: c.__name__)
def test_bad_keyword_and_too_many_positionals_are_refused(cls: type) -> None:
    with pytest.raises(TypeError, match="unexpected keyword argument 'nope'"):
        cls(nope=1)
    with pytest.raises(TypeError, match="positional arguments"):
        cls(*([None] * (len(DEFAULTS[cls]) + 1)))


@pytest.mark.parametrize("cls", GROUPS, ids=lambda c: c.__name__)
def test_equality_hash_repr_replace_pickle(cls: type) -> None:
    a, b = cls(), cls()
    assert a == b and hash(a) == hash(b)
    assert a != object() and (a == object()) is False
    inner = ", ".join(f"{k}={v!r}" for k, v in DEFAULTS[cls].items())
    assert repr(a) == f"{cls.__name__}({inner})"
    assert pickle.loads(pickle.dumps(a)) == a
    assert copy.deepcopy(a) == a and copy.copy(a) == a
    assert dataclasses.asdict(a) == DEFAULTS[cls]


def test_positional_and_keyword_construction() -> None:
    assert StateOptions(("k",), 5.0) == StateOptions(keys=("k",), ttl=5.0)
    assert StateOptions(ttl=5.0) != StateOptions()
    assert dataclasses.replace(StateOptions(), ttl=7.0).ttl == 7.0
    assert dataclasses.replace(ListenOptions(), queue=3) == ListenOptions(queue=3)
    with pytest.raises(TypeError, match="multiple values for argument 'keys'"):
        StateOptions(None, keys=None)
    store = MemoryStore()
    assert Backends(store).store is store and Backends(store) == Backends(store=store)
    assert Backends(store) != Backends(MemoryStore())
    match ToolOptions(False):
        case ToolOptions(mask, validate):
            assert (mask, validate) == (False, True)


def test_post_init_still_validates() -> None:
    with pytest.raises(ValueError, match="lease must be longer than heartbeat"):
        TaskOptions(heartbeat=5.0, lease=5.0)
    with pytest.raises(ValueError, match="every duration must be > 0"):
        TaskOptions(ttl=0)
    with pytest.raises(ValueError, match="lease"):
        dataclasses.replace(TaskOptions(), lease=1.0)


def test_classmethods_survive() -> None:
    assert ServerSettings.from_env({"NIMBLEMCP_STATE_KEYS": "a, b", "NIMBLEMCP_REDIS_URL": ""}) == \
        ServerSettings(state_keys=("a", "b"))

def test_field_flags_are_honoured() -> None:
    """`field(default=..., repr=False / compare=False)`, as the client's records use."""
    from nimblemcp.client._listen import ListenEvent
    from nimblemcp.client._options import CachePolicy

    assert CachePolicy(store=object()) == CachePolicy(store=object())  # store is not compared
    assert hash(CachePolicy(store=[1])) == hash(CachePolicy())  # ... nor hashed
    assert CachePolicy(auth_context="alice") != CachePolicy()
    event = ListenEvent("resource_updated", raw={"secret": 1})
    assert "secret" not in repr(event) and "raw" not in repr(event)  # raw is not shown
    assert repr(event) == ("ListenEvent(kind='resource_updated', uri=None, subscription_id=None, "
                           "task_id=None)")
    with pytest.raises(TypeError, match="missing 1 required positional argument: 'kind'"):
        ListenEvent()  # type: ignore[call-arg]


def test_an_unfrozen_slotted_record() -> None:
    """`dataclass(slots=True)` alone: mutable, compared by value, unhashable."""
    from nimblemcp.transports.client.http import _Resume

    state = _Resume()
    assert state == _Resume(None, None, False) and repr(state) == "_Resume(last_id=None, retry_ms=None, accepted=False)"
    state.last_id = "7"
    assert state == _Resume(last_id="7") and state != _Resume()
    with pytest.raises(TypeError):
        hash(state)
    with pytest.raises(AttributeError):
        state.other = 1  # type: ignore[attr-defined]
    assert not hasattr(state, "__dict__")
    assert dataclasses.replace(state, accepted=True) == _Resume("7", None, True)
