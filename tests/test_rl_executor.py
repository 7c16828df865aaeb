"""The OpenRLHF agent executor, driven through OpenRLHF 0.11.2's real AgentExecutorBase.

Engines: a scripted engine returning vLLM-shaped outputs (stand-in for a model), and the
tiny random Hugging Face model wrapped in vLLM's generate shape. vLLM itself and GPUs
cannot run here; the token bookkeeping is asserted exactly.
"""

from __future__ import annotations

import asyncio
import json

import pytest
from conftest import UvicornThread, needs_data
from engines import (
    SamplingParamsStandIn,
    ScriptedEngine,
    TransformersEngine,
    load_like_openrlhf,
    recording_episodes,
)

from parallelsearch.agents.protocol import render_prompt
from parallelsearch.rl import EnvGraph, score_trajectory
from parallelsearch.rl.agent_config import ENV_VAR, AgentConfigError, load_agent_config
from parallelsearch.rl.data import train_record
from parallelsearch.rl.episode import decode_tokens
from parallelsearch.rl.executor import EpisodeExecutor

pytestmark = needs_data


@pytest.fixture()
def episodes():
    """Every SearchEnv the executor opens (to compare its transcript with the tokens)."""
    with recording_episodes() as opened:
        yield opened


def check_transcript(result, prompt_ids, tok, env):
    """decode(observation_tokens) is exactly prompt + what the environment's transcript holds after its prompt."""
    text = decode_tokens(tok, result["observation_tokens"])
    assert text == decode_tokens(tok, prompt_ids) + env.transcript[len(env.prompt) :]


def check_bookkeeping(result, prompt_ids, engine, tok, label, mode="paper"):
    toks = result["observation_tokens"]
    ranges = result["action_ranges"]
    assert toks[: len(prompt_ids)] == prompt_ids
    assert ranges and ranges[0][0] == len(prompt_ids)
    assert all(b <= c for (_, b), (c, _) in zip(ranges, ranges[1:], strict=False))
    # every range is exactly one engine call's generated ids, in order
    assert [toks[a:b] for a, b in ranges] == engine.outputs
    # retrieved text is never inside a range; what lies between ranges is the environment's
    inside = "".join(tok.decode(toks[a:b]) for a, b in ranges)
    assert "<information>" not in inside
    covered = sum(b - a for a, b in ranges)
    assert covered == sum(len(o) for o in engine.outputs) <= len(toks) - len(prompt_ids)
    expected = score_trajectory(decode_tokens(tok, toks), label, mode, prompt=decode_tokens(tok, prompt_ids))
    assert result["reward"] == pytest.approx(expected.total)
    assert result["scores"] == expected.outcome
    lps = result["rollout_log_probs"]
    if lps is not None:
        assert len(lps) == len(toks)
        in_range = {i for a, b in ranges for i in range(a, b)}
        assert all(lps[i] == 0.0 for i in range(len(toks)) if i not in in_range)
    logs = result["extra_logs"]
    from parallelsearch.rl.rewards import REWARD_PARTS

    for key in (*(f"reward_{p}" for p in REWARD_PARTS), "policy_calls", "search_rounds"):
        assert hasattr(logs[key], "item"), f"{key} must be a tensor"
    assert {k for k in logs if k.startswith("reward_")} == {f"reward_{p}" for p in REWARD_PARTS}
    assert logs["reward_decomposition"].item() == pytest.approx(expected.decomposition)
    return expected


@pytest.fixture(scope="module")
def retriever(hotpot_store):
    from parallelsearch.stores import create_retrieval_app

    with UvicornThread(create_retrieval_app(hotpot_store)) as srv:
        yield srv


@pytest.fixture()
def agent_config(tmp_path, monkeypatch, retriever):
    path = tmp_path / "agent.yaml"
    path.write_text(
        f"retriever_url: {retriever.url}/retrieve\ngraph_config:\n  top_k: 2\n  max_turns: 3\n  max_new_tokens: 64\n"
    )
    monkeypatch.setenv(ENV_VAR, str(path))
    return path


def _comparison(questions):
    return next(
        q
        for q in questions
        if q["metadata"]["type"] == "comparison" and q["metadata"].get("supporting_titles")
    )


def test_openrlhf_loads_executor_and_scripted_episode_bookkeeping(
    agent_config, hotpot_questions, tiny_lm, episodes
):
    _, tok = tiny_lm
    q = _comparison(hotpot_questions)
    a, b = q["metadata"]["supporting_titles"][:2]
    rec = train_record(q)
    turns = [
        f"<think> two entities </think><search> {a} ## {b} </search> trailing text the engine never returns",
        f"<think> compare </think><answer> {q['golden_answers'][0]} </answer>",
    ]
    engine = ScriptedEngine(tok, turns)
    executor = load_like_openrlhf()
    result = asyncio.run(
        executor.execute(rec["prompt"], rec["label"], SamplingParamsStandIn(logprobs=1), 4096, tok, engine)
    )
    prompt_ids = tok(rec["prompt"], add_special_tokens=False)["input_ids"]
    expected = check_bookkeeping(result, prompt_ids, engine, tok, json.loads(rec["label"]))
    check_transcript(result, prompt_ids, tok, episodes[0])
    assert len(result["action_ranges"]) == 2 and not result["truncated"]
    assert expected.correct and expected.decomposed and expected.total == pytest.approx(1.8)
    # the engine saw prompt + action + observation as ids; the observation holds both titles,
    # rendered as the official code does (the agent config's default): the first line verbatim, quoted
    second = engine.requests[1]
    obs = tok.decode(second[result["action_ranges"][0][1] :])
    assert obs.startswith("\n\n<information>") and f'(Title: "{a}")' in obs and f'(Title: "{b}")' in obs
    assert set(result) >= {
        "prompt",
        "label",
        "reward",
        "scores",
        "observation_tokens",
        "action_ranges",
        "rollout_log_probs",
        "truncated",
        "extra_logs",
    }
    assert result["prompt"] == rec["prompt"] and result["label"] == rec["label"]
    assert all(lp == -0.5 for a_, b_ in result["action_ranges"] for lp in result["rollout_log_probs"][a_:b_])


def test_turn_cap_and_max_length_truncation(agent_config, hotpot_questions, tiny_lm):
    _, tok = tiny_lm
    q = _comparison(hotpot_questions)
    rec = train_record(q)
    engine = ScriptedEngine(tok, ["<think> " + "very long thinking " * 200 + "</think>"])
    executor = load_like_openrlhf()
    prompt_ids = tok(rec["prompt"], add_special_tokens=False)["input_ids"]
    max_length = len(prompt_ids) + 150
    result = asyncio.run(
        executor.execute(rec["prompt"], rec["label"], SamplingParamsStandIn(), max_length, tok, engine)
    )
    assert len(result["observation_tokens"]) <= max_length and result["truncated"]
    assert all(b - a <= 64 for a, b in result["action_ranges"]), "per-turn cap (graph max_new_tokens=64)"
    assert result["rollout_log_probs"] is None
    check_bookkeeping(result, prompt_ids, engine, tok, json.loads(rec["label"]))


def test_tiny_hf_model_as_engine(hotpot_store, hotpot_questions, tiny_lm):
    model, tok = tiny_lm
    q = _comparison(hotpot_questions)
    rec = train_record(q)
    engine = TransformersEngine(model, tok)
    g = EnvGraph(hotpot_store, max_turns=2, max_new_tokens=12)
    greedy = SamplingParamsStandIn(logprobs=1, temperature=0)
    result = asyncio.run(EpisodeExecutor(g).execute(rec["prompt"], rec["label"], greedy, 2048, tok, engine))
    prompt_ids = tok(rec["prompt"], add_special_tokens=False)["input_ids"]
    check_bookkeeping(result, prompt_ids, engine, tok, json.loads(rec["label"]))
    assert len(result["action_ranges"]) == 3  # garbage text: 2 invalid turns + the final turn
    lps = result["rollout_log_probs"]
    assert all(lps[i] < 0 for a, b in result["action_ranges"] for i in range(a, b))


def test_official_mode_with_chat_template(hotpot_store, hotpot_questions, tiny_lm):
    _, base = tiny_lm
    if True:  # the tiny tokenizer carries Qwen's chat template
        q = _comparison(hotpot_questions)
        rec = train_record(q, template="official", tokenizer=base)
        assert rec["prompt"].endswith("<|im_start|>assistant\n")
        a, b = q["metadata"]["supporting_titles"][:2]
        engine = ScriptedEngine(
            base,
            [
                f"<think> t </think><search> {a} ## {b} </search>",
                f"<think> t </think><answer> {q['golden_answers'][0]} </answer>",
            ],
        )
        g = EnvGraph(hotpot_store, reward_mode="official", prompt_template="official")
        result = asyncio.run(
            EpisodeExecutor(g).execute(
                rec["prompt"], rec["label"], SamplingParamsStandIn(), 4096, base, engine
            )
        )
        prompt_ids = base(rec["prompt"], add_special_tokens=False)["input_ids"]
        expected = check_bookkeeping(
            result, prompt_ids, engine, base, json.loads(rec["label"]), mode="official"
        )
        # the official score: right answer, valid format, '##' in the first search, one search round
        assert expected.format_valid and expected.total == pytest.approx(1 + 0.45 + 0.35)


def test_config_errors_fail_fast(tmp_path, monkeypatch):
    monkeypatch.delenv(ENV_VAR, raising=False)
    with pytest.raises(AgentConfigError, match=ENV_VAR):
        load_agent_config()
    bad = tmp_path / "bad.yaml"
    bad.write_text("retriever_url: http://127.0.0.1:1/retrieve\nchroma_host: localhost\nstore: x\n")
    with pytest.raises(AgentConfigError, match="exactly one of"):
        load_agent_config(bad)
    typo = tmp_path / "typo.yaml"
    typo.write_text("retriever_url: http://x/retrieve\ngraph_config:\n  top_kk: 3\n")
    with pytest.raises(AgentConfigError, match="graph_config.top_kk"):
        load_agent_config(typo)
    broken = tmp_path / "broken.yaml"
    broken.write_text("retriever_url: [unclosed\n")
    with pytest.raises(AgentConfigError, match="not valid"):
        load_agent_config(broken)
    monkeypatch.setenv(ENV_VAR, str(tmp_path / "missing.yaml"))
    with pytest.raises(AgentConfigError, match="does not exist"):
        load_like_openrlhf()


def test_question_taken_from_prompt_when_label_lacks_it():
    from parallelsearch.rl.executor import question_from

    prompt = render_prompt("Who is older, A or B?")
    assert question_from(prompt, {"golden_answers": ["A"]}) == "Who is older, A or B?"
    with pytest.raises(ValueError, match="cannot find the question"):
        question_from("no question here", {"golden_answers": ["A"]})


@pytest.mark.parametrize("template", ["paper", "official"])
def test_chat_template_episode_scores_like_the_environment(
    hotpot_store, hotpot_questions, tiny_lm, episodes, template
):
    """Defect: decoding without special tokens dropped <|im_start|>assistant, paper mode then counted the
    leftover 'assistant' as text outside tags (1.7 instead of 1.8). The executor now knows where the
    prompt ends in tokens; its reward equals the environment's and score_trajectory on the raw text."""
    _, tok = tiny_lm
    q = _comparison(hotpot_questions)
    a, b = q["metadata"]["supporting_titles"][:2]
    rec = train_record(q, template=template, tokenizer=tok)
    assert rec["prompt"].endswith("<|im_start|>assistant\n")
    gold = q["golden_answers"][0]
    engine = ScriptedEngine(
        tok,
        [
            f"<think> t </think>\n<search> {a} ## {b} </search>",
            f"<think> t </think>\n<answer> {gold} </answer>",
        ],
    )
    g = EnvGraph(hotpot_store, reward_mode="paper", prompt_template=template)
    result = asyncio.run(
        EpisodeExecutor(g).execute(rec["prompt"], rec["label"], SamplingParamsStandIn(), 4096, tok, engine)
    )
    env = episodes[0]
    label = json.loads(rec["label"])
    assert result["reward"] == pytest.approx(1.8)
    raw = rec["prompt"] + env.transcript[len(env.prompt) :]
    assert score_trajectory(raw, label, "paper", prompt=rec["prompt"]).total == pytest.approx(1.8)
    assert score_trajectory(env.transcript, label, "paper", prompt=env.prompt).total == pytest.approx(1.8)
    check_transcript(result, tok(rec["prompt"], add_special_tokens=False)["input_ids"], tok, env)


def test_tokens_and_text_never_drift_after_a_stop_string(hotpot_store, hotpot_questions, tiny_lm, episodes):
    """Defect: vLLM cuts ``text`` after the stop string but keeps the token that completed it (``>\\n\\n``
    here, a real merge of the tiny Qwen-style tokenizer). The environment must continue from the decoded
    tokens, so the sequence trained on is the transcript the environment and the reward saw."""
    _, tok = tiny_lm
    assert ">\n\n" in [tok.decode([i]) for i in tok("</search>\n\n", add_special_tokens=False)["input_ids"]]
    q = _comparison(hotpot_questions)
    a, b = q["metadata"]["supporting_titles"][:2]
    rec = train_record(q)
    gold = q["golden_answers"][0]
    engine = ScriptedEngine(
        tok,
        [
            f"<think> t </think>\n<search> {a} ## {b} </search>\n\nthe model would go on",
            f"<think> t </think>\n<answer> {gold} </answer>\n\nand on",
        ],
    )
    executor_cfg = EnvGraph(hotpot_store)
    result = asyncio.run(
        EpisodeExecutor(executor_cfg).execute(
            rec["prompt"], rec["label"], SamplingParamsStandIn(), 4096, tok, engine
        )
    )
    # the engine's text stops at the stop string, its ids carry the newlines past it
    assert engine.texts[0].endswith("</search>") and tok.decode(engine.outputs[0]).endswith("</search>\n\n")
    env = episodes[0]
    assert "</search>\n\n\n\n<information>" in env.transcript  # what the policy's tokens really say
    prompt_ids = tok(rec["prompt"], add_special_tokens=False)["input_ids"]
    check_transcript(result, prompt_ids, tok, env)
    expected = check_bookkeeping(result, prompt_ids, engine, tok, json.loads(rec["label"]))
    assert expected.format_valid and result["reward"] == pytest.approx(1.8)


def test_lone_surrogates_in_prompt_and_observations_are_replaced(hotpot_questions, tiny_lm):
    """A prompt or a retrieved passage holding a lone surrogate (what ``json.dumps`` writes
    for Python text that holds one) used to crash the tokenizer (TypeError). The retriever here is
    a real loopback server in the Search-R1 format (a stand-in for a third-party /retrieve server
    that sends such escapes); the episode runs, the text shows U+FFFD and the count is logged."""
    from starlette.applications import Starlette
    from starlette.responses import Response
    from starlette.routing import Route

    from parallelsearch.agents.searchers.backends import RemoteSearcher
    from parallelsearch.stores.http.retrieval_client import RetrieverClient

    async def retrieve(request):
        body = await request.json()
        doc = {"document": {"id": "1", "contents": '"Bad \ud800 title"\ntext \udcff here'}, "score": 0.5}
        raw = json.dumps({"result": [[doc]] * len(body["queries"])})
        assert "\\ud800" in raw  # escapes on the wire, as json.dumps writes them
        return Response(raw, media_type="application/json")

    app = Starlette(routes=[Route("/retrieve", retrieve, methods=["POST"])])

    _, tok = tiny_lm
    q = _comparison(hotpot_questions)
    rec = train_record(q)
    prompt = rec["prompt"].replace("Question: ", "Question: \udc80 ", 1)
    turns = [
        "<think> look </think><search> a ## b </search>",
        f"<think> done </think><answer> {q['golden_answers'][0]} </answer>",
    ]
    engine = ScriptedEngine(tok, turns)
    with UvicornThread(app) as srv:
        env_graph = EnvGraph(RemoteSearcher(RetrieverClient(f"{srv.url}/retrieve")), max_turns=2)
        result = asyncio.run(
            EpisodeExecutor(env_graph).execute(
                prompt, rec["label"], SamplingParamsStandIn(), 4096, tok, engine
            )
        )
    text = decode_tokens(tok, result["observation_tokens"])
    assert "\ud800" not in text and "Bad \ufffd title" in text and "text \ufffd here" in text
    assert result["extra_logs"]["invalid_chars_replaced"].item() == 1  # the prompt's; passages: protocol
    assert len(result["action_ranges"]) == 2 and result["reward"] is not None


def test_a_search_with_k_is_one_step_and_its_observation_tokens_are_the_graphs_bytes(
    agent_config, hotpot_questions, tiny_lm, monkeypatch
):
    """``<search> a ## #1 b </search>``: both stages run inside one environment step, and the ids
    the executor appends after the action are exactly the graph's one observation, tokenized."""
    from parallelsearch.rl.env import SearchEnv

    _, tok = tiny_lm
    observations: list[str] = []
    real_step = SearchEnv.step

    async def recording(self, *args, **kwargs):  # whatever step takes: the test reads what it returns
        step = await real_step(self, *args, **kwargs)
        observations.append(step.observation or "")
        return step

    monkeypatch.setattr(SearchEnv, "step", recording)
    q = _comparison(hotpot_questions)
    rec = train_record(q)
    turns = [
        "<think> hop by hop </think><search> Doctor Strange director ## #1 nationality </search>",
        f"<think> done </think><answer> {q['golden_answers'][0]} </answer>",
    ]
    engine = ScriptedEngine(tok, turns)
    result = asyncio.run(
        load_like_openrlhf().execute(rec["prompt"], rec["label"], SamplingParamsStandIn(), 4096, tok, engine)
    )
    (_, first_end), (second_start, _) = result["action_ranges"]
    obs = observations[0]
    assert obs.count("<information>") == 1 and "Searched as: " in obs  # the dependent one, as searched
    assert (
        result["observation_tokens"][first_end:second_start]
        == tok(obs, add_special_tokens=False)["input_ids"]
    )
    assert decode_tokens(tok, result["observation_tokens"][first_end:second_start]) == obs
    logs = result["extra_logs"]
    assert logs["policy_calls"].item() == 2 and logs["search_rounds"].item() == 2
