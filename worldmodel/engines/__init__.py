"""Inference engines behind one interface: transformers, an OpenAI-compatible endpoint, vLLM."""
