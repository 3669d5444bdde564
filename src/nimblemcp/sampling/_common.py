"""What both provider mappings share: the model a request gets, the blocks of a message,
and the refusal a request that cannot be mapped answers.

Model choice follows the spec's advice on `modelPreferences.hints` (client/sampling):
hints are tried in order, each a substring of a model name; the first hint that names
one of the sampler's `models` picks it (an `aliases` key found in the hint maps it to a
model of this provider: `{"sonnet": "gpt-5.4"}`); when none does, the sampler's default
`model`. The numeric priorities are advisory and not used.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from nimblemcp.errors import InputRequestRefused

__all__ = ["ModelChoice", "blocks", "refuse", "tool_result_text"]


class ModelChoice:
    """The default model, the models hints may pick, and aliases from other providers'
    names."""

    __slots__ = ("aliases", "default", "models")

    def __init__(self, default: str, models: Sequence[str] = (), aliases: Mapping[str, str] | None = None) -> None:
        if not default:
            raise ValueError("a sampler needs a default model name")
        self.default = default
        self.models = tuple(models) or (default,)
        self.aliases = dict(aliases or {})

    def pick(self, params: Mapping[str, Any]) -> str:
        preferences = params.get("modelPreferences")
        hints = preferences.get("hints") if isinstance(preferences, Mapping) else None
        for hint in hints if isinstance(hints, list) else ():
            name = hint.get("name") if isinstance(hint, Mapping) else None
            if not isinstance(name, str) or not name:
                continue
            wanted = name.lower()
            for model in self.models:
                if wanted in model.lower():
                    return model
            for alias, model in self.aliases.items():
                if alias.lower() in wanted:
                    return model
        return self.default


def refuse(provider: str, why: str) -> InputRequestRefused:
    return InputRequestRefused(f"sampling with {provider}: {why}")


def blocks(message: Mapping[str, Any]) -> list[dict[str, Any]]:
    """A sampling message's content as a list of blocks."""
    content = message.get("content")
    items = content if isinstance(content, list) else [content]
    return [b for b in items if isinstance(b, dict)]


def tool_result_text(block: Mapping[str, Any]) -> str:
    """A tool result as text, for a provider whose tool results hold text only: its text
    blocks, else its structured content, else its blocks, as JSON."""
    parts = block.get("content") or []
    texts = [p["text"] for p in parts if isinstance(p, dict) and p.get("type") == "text" and "text" in p]
    if texts:
        return "\n".join(texts)
    if block.get("structuredContent") is not None:
        return json.dumps(block["structuredContent"])
    return json.dumps(parts)
