"""Model providers, resolved from ``provider:model`` ids.

``ModelRegistry.for_worker`` registers ``anthropic:`` and ``openai:`` as factories only:
no SDK client is made and no API key is read until the first request of that provider, so
a worker with neither key set still starts and serves ``demo:`` turns.
"""

from __future__ import annotations

from collections.abc import Callable

from durable_turns.config import Settings
from durable_turns.models.base import ModelProvider, ModelRequest, ProviderError
from durable_turns.models.demo import DemoProvider


class ModelRegistry:
    """Resolves ``provider:model`` ids to provider instances, built once per worker."""

    def __init__(self, factories: dict[str, Callable[[], ModelProvider]] | None = None) -> None:
        self._factories: dict[str, Callable[[], ModelProvider]] = {"demo": DemoProvider}
        self._factories.update(factories or {})
        self._providers: dict[str, ModelProvider] = {}

    @classmethod
    def for_worker(cls, settings: Settings) -> ModelRegistry:
        """demo, anthropic and openai; each provider's client is built on first use."""

        def anthropic() -> ModelProvider:
            from durable_turns.models.anthropic import AnthropicProvider

            return AnthropicProvider(timeout=settings.step_timeout_s)

        def openai() -> ModelProvider:
            from durable_turns.models.openai import OpenAIProvider

            return OpenAIProvider(timeout=settings.step_timeout_s)

        def demo() -> ModelProvider:
            return DemoProvider(str(settings.demo_dir) if settings.demo_dir else None)

        return cls({"demo": demo, "anthropic": anthropic, "openai": openai})

    def register(self, prefix: str, factory: Callable[[], ModelProvider]) -> None:
        self._factories[prefix] = factory
        self._providers.pop(prefix, None)

    def resolve(self, model_id: str) -> tuple[ModelProvider, str]:
        """``"anthropic:claude-…"`` → (the anthropic provider, ``"claude-…"``)."""
        prefix, sep, name = model_id.partition(":")
        if not sep or not name:
            raise ProviderError(
                f"model id {model_id!r} is not of the form provider:model",
                kind="invalid_request",
            )
        if prefix not in self._factories:
            raise ProviderError(
                f"unknown model provider {prefix!r} in {model_id!r};"
                f" known: {', '.join(sorted(self._factories))}",
                kind="invalid_request",
            )
        if prefix not in self._providers:
            self._providers[prefix] = self._factories[prefix]()
        return self._providers[prefix], name

    async def aclose(self) -> None:
        for provider in self._providers.values():
            await provider.aclose()


__all__ = ["DemoProvider", "ModelProvider", "ModelRegistry", "ModelRequest", "ProviderError"]
