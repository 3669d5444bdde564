"""Ready answers to a server's sampling requests, from OpenAI or Anthropic models.

    from nimblemcp.sampling import OpenAISampler

    sampler = OpenAISampler("gpt-5.4-mini")           # OPENAI_API_KEY from the environment
    async with Client(url, on_sample=sampler, sampling_capabilities=sampler.capabilities) as client:
        ...

A sampler is a client's `on_sample` callback: it answers `sampling/createMessage` in
both eras (an MRTR input request, or a 2025-11-25 server's request on its session). It
maps the request onto the provider's API (messages with text, images and, for OpenAI,
audio; the system prompt; `maxTokens`, `temperature`, `stopSequences`; tools and tool
choice) and the answer back (text and tool uses, the model, the stop reason). Its
`capabilities` (`{"tools": {}}`) declare tool use, without which a server may not send
tools. What the provider cannot take, and a provider's own error, raise
`InputRequestRefused`: the call that asked fails with it. The spec wants a human in
the loop: to review requests or answers, wrap the sampler in your own callback.

Needs the `[openai]` or `[anthropic]` extra. Imports neither client nor server.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from nimblemcp._extras import needs_extra
from nimblemcp.sampling import _anthropic, _openai
from nimblemcp.sampling._common import ModelChoice, refuse

if TYPE_CHECKING:
    import anthropic
    import openai

__all__ = ["AnthropicSampler", "OpenAISampler"]

_TOOLS: Mapping[str, Any] = MappingProxyType({"tools": {}})


class OpenAISampler:
    """Answer sampling requests with OpenAI's Chat Completions API.

        sampler = OpenAISampler("gpt-5.4-mini", models=["gpt-5.4", "gpt-5.4-mini"],
                                aliases={"opus": "gpt-5.4"})

    `model` answers when no hint of the request names another; `models` are the ones a
    hint may pick (by substring), `aliases` map other providers' names found in a hint
    to one of yours. `client` is your `openai.AsyncOpenAI` (key, base URL, retries);
    without one, one is made on the first request (it reads `OPENAI_API_KEY`)."""

    capabilities: Mapping[str, Any] = _TOOLS

    def __init__(self, model: str, *, models: Sequence[str] = (), aliases: Mapping[str, str] | None = None,
                 client: openai.AsyncOpenAI | None = None) -> None:
        with needs_extra("openai", "OpenAISampler"):
            import openai
        self._sdk = openai
        self.choice = ModelChoice(model, models, aliases)
        self.client = client

    async def __call__(self, params: dict[str, Any]) -> dict[str, Any]:
        call = _openai.request(params, self.choice.pick(params))
        if self.client is None:
            self.client = self._sdk.AsyncOpenAI()
        try:
            completion = await self.client.chat.completions.create(**call)
        except self._sdk.APIError as exc:
            raise refuse(_openai.PROVIDER, f"the API answered: {exc}") from exc
        return _openai.result(completion.model_dump(mode="json"))


class AnthropicSampler:
    """Answer sampling requests with Anthropic's Messages API.

        sampler = AnthropicSampler("claude-sonnet-4-6", models=["claude-opus-4-7", "claude-sonnet-4-6"])

    The options are `OpenAISampler`'s; `client` is your `anthropic.AsyncAnthropic`
    (without one, one is made on the first request: it reads `ANTHROPIC_API_KEY`)."""

    capabilities: Mapping[str, Any] = _TOOLS

    def __init__(self, model: str, *, models: Sequence[str] = (), aliases: Mapping[str, str] | None = None,
                 client: anthropic.AsyncAnthropic | None = None) -> None:
        with needs_extra("anthropic", "AnthropicSampler"):
            import anthropic
        self._sdk = anthropic
        self.choice = ModelChoice(model, models, aliases)
        self.client = client
        self._temperature: bool | None = None  # whether this SDK's messages.create takes it

    async def __call__(self, params: dict[str, Any]) -> dict[str, Any]:
        if self.client is None:
            self.client = self._sdk.AsyncAnthropic()
        if self._temperature is None:
            import inspect

            self._temperature = "temperature" in inspect.signature(self.client.messages.create).parameters
        call = _anthropic.request(params, self.choice.pick(params), temperature=self._temperature)
        try:
            message = await self.client.messages.create(**call)
        except self._sdk.APIError as exc:
            raise refuse(_anthropic.PROVIDER, f"the API answered: {exc}") from exc
        return _anthropic.result(message.model_dump(mode="json"))
