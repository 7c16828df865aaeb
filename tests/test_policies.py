"""Policy backends: a tiny random HF model, an OpenAI-compatible endpoint on loopback, a LangChain chat model."""

from __future__ import annotations

import asyncio

import pytest
from conftest import UvicornThread, needs_data
from servers import make_openai_test_server

from parallelsearch.agents.policies import (
    ChatModelPolicy,
    HFPolicy,
    OpenAICompletionsPolicy,
    TurnRequest,
    policy_from_spec,
)
from parallelsearch.graphs import build_parallel_search_graph

Q = "Were Scott Derrickson and Ed Wood of the same nationality?"


def test_hf_policy_generates_and_respects_caps(tiny_lm):
    model, tok = tiny_lm
    pol = HFPolicy(model, tok)
    res = asyncio.run(pol.agenerate(TurnRequest(transcript="Question: x", max_tokens=12, logprobs=True)))
    assert res.completion_tokens is not None and 1 <= res.completion_tokens <= 12
    assert (
        res.logprobs is not None
        and len(res.logprobs) == len(res.token_ids)
        and all(lp <= 0 for lp in res.logprobs)
    )
    assert res.finish_reason in ("stop", "length")


@needs_data
def test_hf_garbage_exercises_invalid_path_and_max_turns(tiny_lm, hotpot_store):
    model, tok = tiny_lm
    g = build_parallel_search_graph(HFPolicy(model, tok), hotpot_store, max_turns=2, max_new_tokens=16)
    out = asyncio.run(g.ainvoke({"question": Q}))
    assert out["policy_calls"] == 3  # 2 turns + the final answer-only turn
    assert out["tokens_out"] and out["tokens_in"]
    assert out["status"] in ("answered", "unanswered")


@needs_data
def test_openai_compatible_policy_over_real_http(hotpot_store, monkeypatch):
    import ssl

    made = []  # httpx would build a TLS context per client; the policy passes the shared one
    real = ssl.create_default_context
    monkeypatch.setattr(ssl, "create_default_context", lambda *a, **kw: made.append(1) or real(*a, **kw))
    app = make_openai_test_server()
    with UvicornThread(app) as srv:
        pol = policy_from_spec(f"openai:test-model@{srv.url}/v1")
        assert isinstance(pol, OpenAICompletionsPolicy)
        out = asyncio.run(build_parallel_search_graph(pol, hotpot_store).ainvoke({"question": Q}))
    assert (out["policy_calls"], out["subqueries"], out["answer"]) == (2, 2, "yes")
    assert "</search>" in out["transcript"]  # stop string restored from stop_reason
    sent = app.state.requests[0]
    assert sent["stop"] == ["</search>", "</answer>"] and sent["model"] == "test-model"
    assert sent["include_stop_str_in_output"] is True
    assert out["tokens_in"] > 0
    assert len(made) <= 1


def test_openai_policy_errors_are_clear():
    pol = OpenAICompletionsPolicy("m", "http://127.0.0.1:9/v1", timeout_s=1, retries=0)
    with pytest.raises(RuntimeError, match="failed after 1 attempts"):
        asyncio.run(pol.agenerate(TurnRequest(transcript="x")))


@needs_data
def test_langchain_fake_chat_model_policy_and_separate_answer_model(hotpot_store):
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
    from langchain_core.messages import AIMessage

    planner = ChatModelPolicy(
        GenericFakeChatModel(
            messages=iter(
                [
                    AIMessage(
                        content="<think>split</think><search> Scott Derrickson ## Ed Wood"
                    ),  # chat APIs drop the stop string
                    AIMessage(content="<answer> no </answer>"),
                ]
            )
        )
    )
    answerer = ChatModelPolicy(
        GenericFakeChatModel(messages=iter([AIMessage(content="<answer> yes </answer>")]))
    )
    out = asyncio.run(
        build_parallel_search_graph(planner, hotpot_store, answer_policy=answerer).ainvoke({"question": Q})
    )
    assert out["subqueries"] == 2 and out["answer"] == "yes" and out["policy_calls"] == 3
    assert "Ed Wood </search>" in out["transcript"] or "Ed Wood</search>" in out["transcript"]


def test_spec_errors():
    with pytest.raises(ValueError, match="unknown policy .gpt."):
        policy_from_spec("gpt:4")
    with pytest.raises(ValueError, match="needs a value"):
        policy_from_spec("hf:")
    with pytest.raises(RuntimeError, match="vllm"):
        policy_from_spec("vllm:/nope")
