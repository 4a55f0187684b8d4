"""The OpenAI-compatible engine against a local endpoint that serves the tiny model: the same
predictions as the transformers engine for the same model and seed, bounded and reported
retries on unparsable output, clear HTTP errors."""

from __future__ import annotations

import pytest
from engine_helpers import conversations, prompts, tiny_model, tiny_tokenizer
from openai_stub import StubState, serve_stub

from simworld.worldmodel.engines import GenerationConfig
from simworld.worldmodel.engines.hf import TransformersEngine
from simworld.worldmodel.engines.openai_http import EndpointError, OpenAIEngine

GREEDY = GenerationConfig(max_new_tokens=10)
SAMPLED = GenerationConfig(max_new_tokens=10, do_sample=True, temperature=0.8, seed=11)


def local(decode: str) -> TransformersEngine:
    return TransformersEngine(tiny_model(), tiny_tokenizer(), decode=decode)


def test_same_greedy_predictions_as_the_transformers_engine() -> None:
    state = StubState(engine=local("generate"))  # the endpoint runs HF generate
    convs = conversations(3)
    with serve_stub(state) as url:
        remote = OpenAIEngine(url, model="tiny").generate_chat(convs, GREEDY)
    assert remote == local("own").generate_chat(convs, GREEDY)
    assert all(r["response_format"] == {"type": "json_object"} for r in state.requests)
    assert sorted(r["seed"] for r in state.requests) == [0, 1, 2]


def test_same_seeded_samples_as_the_transformers_engine() -> None:
    convs = conversations(3)
    with serve_stub(StubState(engine=local("own"))) as url:
        remote = OpenAIEngine(url, model="tiny", json_mode=False).generate_chat(convs, SAMPLED)
    assert remote == local("own").generate_chat(convs, SAMPLED)


def test_completions_route() -> None:
    ps = prompts(2)
    with serve_stub(StubState(engine=local("own"))) as url:
        assert OpenAIEngine(url, model="tiny").generate(ps, GREEDY) == local("own").generate(
            ps, GREEDY
        )


def test_unparsable_output_is_retried_then_reported() -> None:
    def valid(text: str) -> bool:
        return not text.startswith("not json")

    state = StubState(engine=local("own"), garbage=2)
    with serve_stub(state) as url:
        engine = OpenAIEngine(url, model="tiny", max_retries=2)
        out = engine.generate_chat(conversations(1), GREEDY, validate=valid)
        assert valid(out[0]) and engine.last_report.attempts == [3]
        assert engine.last_report.invalid == []
        state.garbage = 10
        out = engine.generate_chat(conversations(1), GREEDY, validate=valid)
    assert out == ["not json {"]
    assert engine.last_report.attempts == [3] and engine.last_report.invalid == [0]
    assert len(state.requests) == 6
    assert [r["seed"] for r in state.requests[3:]] == [0, 1000, 2000]


def test_http_errors_are_clear() -> None:
    state = StubState(engine=local("own"), fail_status=400)
    with serve_stub(state) as url:
        with pytest.raises(EndpointError, match=r"/v1/chat/completions answered HTTP 400.*stub"):
            OpenAIEngine(url, model="tiny").generate_chat(conversations(1), GREEDY)
        state.fail_status = 503
        with pytest.raises(EndpointError, match="HTTP 503"):
            OpenAIEngine(url, model="tiny", http_retries=1).generate_chat(conversations(1), GREEDY)
    assert len(state.requests) == 1 + 2  # 400 is not retried; 503 is, once
    with pytest.raises(EndpointError, match="failed"):
        OpenAIEngine(url, model="tiny", http_retries=0).generate_chat(conversations(1), GREEDY)
