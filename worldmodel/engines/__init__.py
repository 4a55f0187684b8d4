"""Inference engines behind one interface: transformers, an OpenAI-compatible endpoint, vLLM.

Only the interface is imported here; an engine's module (and torch, httpx or vllm with it)
loads when `load_engine` builds that engine or when it is imported by name."""

from simworld.worldmodel.engines.base import (
    ChatEngine,
    Engine,
    GenerationConfig,
    RetryReport,
    load_engine,
)

__all__ = ["ChatEngine", "Engine", "GenerationConfig", "RetryReport", "load_engine"]
