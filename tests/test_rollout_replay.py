"""``rollout`` replays the training environment: the same episodes driven by the executor (OpenRLHF's
prompt, chat-templated by OpenRLHF's own ``preprocess_data``) and by a rollout (the environment's
prompt framed by the job's :class:`Replay`) give the same tokens and the same reward, cut episodes
and loophole episodes included; ``rollout --config JOB/train_config.yaml`` reads the job's reward."""

from __future__ import annotations

import asyncio
import json

import pytest
import yaml
from engines import SamplingParamsStandIn, ScriptedEngine

from parallelsearch.agents.protocol import TurnResult
from parallelsearch.agents.searchers.adapters import FunctionSearcher
from parallelsearch.cli import main
from parallelsearch.data import load_questions
from parallelsearch.demo_data import HOTPOTQA_SAMPLE
from parallelsearch.rl.data import train_record
from parallelsearch.rl.env import EnvGraph
from parallelsearch.rl.executor import EpisodeExecutor
from parallelsearch.rl.openrlhf_cpu import preprocess_data
from parallelsearch.rl.rollout import Replay, rollout_episode

TURN_CAP, MAX_LEN = 48, 900


def _search(query: str) -> list[dict[str, str]]:
    return [{"title": f"About {query[:20]}", "text": f"the corpus on {query} " * 3}]


def scripts(q: dict) -> list[list[str]]:
    """The episodes each question is played with: split, one search, a loophole, never answering
    (cut at the turn cap), a turn past the cap, and an invalid turn."""
    gold = q["golden_answers"][0]
    answer = f"<think> so </think><answer> {gold} </answer>"
    return [
        ["<think> two </think><search> first born ## second born </search>", answer],
        [
            "<think> one </think><search> who is older </search>",
            "<think> no </think><answer> nobody </answer>",
        ],
        ["<think> a </think><search> first ## first </search>", answer],
        ["<think> open </think><search> first born ## second born ", answer],
        ["<think> " + "long " * 80],  # cut at the turn cap, never answers
        ["<think> hmm </think> no tags", "<think> " + "more " * 80],
    ]


class EnginePolicy:
    """A stand-in policy for a model: the scripted engine behind the policy interface, token in,
    token out, as a vLLM policy is during a rollout with tokens."""

    name = "engine-stand-in"

    def __init__(self, engine: ScriptedEngine):
        self.engine = engine

    async def agenerate(self, request) -> TurnResult:
        params = SamplingParamsStandIn(
            max_tokens=request.max_tokens,
            stop=list(request.stop),
            include_stop_str_in_output=True,
            logprobs=1,
        )
        out = (await self.engine.generate(request.token_ids, params)).outputs[0]
        lps = [next(iter(d.values())).logprob for d in out.logprobs]
        return TurnResult(out.text, list(out.token_ids), lps, out.finish_reason)


def both(tok, env_graph: EnvGraph, q: dict, turns: list[str]) -> tuple[dict, dict]:
    """The executor's sample and the rollout's record of one scripted episode."""
    rec = train_record(q, template="official")
    prompt, label = preprocess_data()(
        rec, input_key="prompt", label_key="label", apply_chat_template=tok.apply_chat_template
    )
    params = SamplingParamsStandIn(max_tokens=TURN_CAP, logprobs=1)
    executor = EpisodeExecutor(env_graph)
    sample = asyncio.run(executor.execute(prompt, label, params, MAX_LEN, tok, ScriptedEngine(tok, turns)))
    replay = Replay(
        chat_template=True, tokenizer=tok, max_length=MAX_LEN, turn_cap=TURN_CAP, training_question=True
    )
    policy = EnginePolicy(ScriptedEngine(tok, turns))
    record = asyncio.run(rollout_episode(env_graph, policy, q, replay=replay))
    return sample, record


@pytest.mark.parametrize("mode", ["paper-strict", "official"])
def test_rollout_rewards_equal_the_executors(tiny_lm, mode):
    _, tok = tiny_lm
    env_graph = EnvGraph(
        FunctionSearcher(_search),
        reward_mode=mode,
        prompt_template="official",
        max_new_tokens=TURN_CAP,
        observation_titles="official",
    )
    questions = load_questions(HOTPOTQA_SAMPLE)[:4]
    compared, cut = 0, 0
    for q in questions:
        for turns in scripts(q):
            sample, record = both(tok, env_graph, q, turns)
            assert record["error"] is None, record["error"]
            assert record["token_ids"] == sample["observation_tokens"]
            assert record["reward"]["total"] == pytest.approx(sample["reward"], abs=0), (mode, turns)
            compared += 1
            cut += record["cut"]
    assert compared == 24 and cut >= 4  # cut episodes scored by the trainer's rule, not as any other


def test_a_cut_episode_keeps_no_positive_shaped_term(tiny_lm):
    """Cut at the turn cap before any search or answer on a bridge question: ``paper``'s 0.15 for not
    splitting is dropped and the search-count term's -0.35 stays, as the trainer scores it (not -0.2)."""
    _, tok = tiny_lm
    env_graph = EnvGraph(
        FunctionSearcher(_search), reward_mode="paper", prompt_template="official", max_new_tokens=TURN_CAP
    )
    bridge = next(q for q in load_questions(HOTPOTQA_SAMPLE) if q["metadata"].get("type") == "bridge")
    sample, record = both(tok, env_graph, bridge, ["<think> " + "long " * 80])
    assert record["cut"] and record["reward"]["total"] == pytest.approx(-0.35) == sample["reward"]


def test_official_rollout_frames_the_prompt_in_chatml_without_a_tokenizer():
    """An oracle-perfect episode under the official reward is valid: its prompt is chat-framed."""
    from parallelsearch.agents.policies.scripted import ScriptedPolicy

    q = next(q for q in load_questions(HOTPOTQA_SAMPLE) if q["metadata"].get("type") == "comparison")
    gold = q["golden_answers"][0]
    policy = ScriptedPolicy(
        ["<think> t </think><search> a ## b </search>", f"<think> t </think><answer> {gold} </answer>"]
    )
    env_graph = EnvGraph(FunctionSearcher(_search), reward_mode="official", prompt_template="official")
    bare = asyncio.run(rollout_episode(env_graph, policy, q))
    assert not bare["reward"]["format_valid"]  # the text has no assistant marker
    policy = ScriptedPolicy(
        ["<think> t </think><search> a ## b </search>", f"<think> t </think><answer> {gold} </answer>"]
    )
    framed = asyncio.run(rollout_episode(env_graph, policy, q, replay=Replay(chat_template=True)))
    assert framed["reward"]["format_valid"] and framed["reward"]["total"] == pytest.approx(1.8)


@pytest.mark.parametrize("mode", ["official", "paper-strict"])
def test_rollout_config_replays_the_job(hotpot_store, tiny_model_dir, tmp_path, capsys, mode):
    cfg = {
        "model": str(tiny_model_dir),
        "prompt_data": str(tmp_path / "train.jsonl"),
        "apply_chat_template": True,
        "max_len": 4096,
        "agent": {
            "chroma_path": str(hotpot_store.location),
            "store": hotpot_store.name,
            "graph_config": {"prompt_template": "official", "top_k": 2},
            "reward": {"mode": mode, "weights": {"lambda_f": 0.2} if mode != "official" else {}},
        },
    }
    path = tmp_path / "train_config.yaml"
    path.write_text(yaml.safe_dump(cfg))
    out = tmp_path / "episodes.jsonl"
    argv = ["rollout", "--config", str(path), "--data", str(HOTPOTQA_SAMPLE), "--policy", "oracle"]
    assert main([*argv, "--limit", "4", "--out", str(out), "--concurrency", "2"]) == 0
    printed = capsys.readouterr().out
    assert "format valid 100.0%" in printed, printed
    recs = [json.loads(line) for line in out.read_text().splitlines()]
    assert all(r["reward"]["mode"] == mode and r["token_ids"] for r in recs)
    assert all(r["prompt"] in r["text"] and "<|im_start|>assistant" in r["text"] for r in recs)
    if mode != "official":  # the job's weights, not the mode's defaults
        assert all(r["reward"]["weights"]["lambda_f"] == 0.2 for r in recs)
    # the job's settings are replayed, not mixed with flags
    assert main([*argv, "--out", str(out), "--reward-mode", "paper"]) == 2
    assert "--reward-mode: rollout --config" in capsys.readouterr().err
    if mode == "official":
        return
    # a gateway-mode job trains the chat agent, which the text environment cannot replay: said, not faked
    path.write_text(yaml.safe_dump({**cfg, "agent": {**cfg["agent"], "mode": "gateway"}}))
    assert main([*argv, "--out", str(out)]) == 2
    assert "the job trains with agent.mode=gateway" in capsys.readouterr().err


def test_a_settings_file_with_a_reward_block_is_refused(tmp_path, monkeypatch, capsys):
    settings = tmp_path / "parallelsearch.yaml"
    settings.write_text("reward:\n  mode: official\n")
    monkeypatch.setenv("PARALLELSEARCH_CONFIG", str(settings))
    argv = [
        "rollout",
        "--data",
        str(HOTPOTQA_SAMPLE),
        "--policy",
        "oracle",
        "--out",
        str(tmp_path / "o.jsonl"),
    ]
    assert main(argv) == 2
    assert "holds a reward: block, which rollout does not read from settings" in capsys.readouterr().err
