"""The training environment: the compiled graph with the external policy, over a real Chroma store."""

from __future__ import annotations

import asyncio

import pytest
from conftest import needs_data

from parallelsearch.agents.protocol import INVALID_FEEDBACK, render_prompt
from parallelsearch.rl import EnvGraph, score_trajectory
from parallelsearch.rl.data import label_of
from parallelsearch.rl.rollout import rollout

pytestmark = needs_data


def _comparison(questions):
    return next(
        q
        for q in questions
        if q["metadata"]["type"] == "comparison" and q["metadata"].get("supporting_titles")
    )


def test_reset_step_reward_over_real_store(hotpot_store, hotpot_questions):
    q = _comparison(hotpot_questions)
    a, b = q["metadata"]["supporting_titles"][:2]
    g = EnvGraph(hotpot_store, top_k=2)

    async def episode():
        env = g.new_episode()
        prompt = await env.reset(q["question"], label_of(q))
        assert prompt == render_prompt(q["question"], "paper")
        s1 = await env.step(f"<think> two entities </think><search> {a} ## {b} </search>")
        assert not s1.done
        assert s1.observation.startswith("\n\n<information>") and s1.observation.count("Doc 1(Title:") == 2
        assert f"(Title: {a})" in s1.observation and f"(Title: {b})" in s1.observation
        answer = q["golden_answers"][0]
        s2 = await env.step(f"<think> compare </think><answer> {answer} </answer>")
        assert s2.done and s2.observation == ""
        with pytest.raises(RuntimeError, match="episode is over"):
            await env.step("<answer> again </answer>")
        return env, prompt, s2

    env, prompt, last = asyncio.run(episode())
    out = last.output
    assert (out["policy_calls"], out["search_rounds"], out["subqueries"], out["status"]) == (
        2,
        1,
        2,
        "answered",
    )
    reward = g.score(last.episode, label_of(q))
    # the record's reward is what the transcript, read back, scores
    assert reward == score_trajectory(env.transcript, label_of(q), prompt=prompt)
    assert reward.correct and reward.decomposed and reward.format_valid
    assert reward.total == pytest.approx(1 + 0.45 + 0.35)
    assert not g.checkpointer.storage, "finished episodes must not leave checkpoints behind"


def test_invalid_action_feedback_and_final_turn(hotpot_store):
    g = EnvGraph(hotpot_store, max_turns=1)

    async def episode():
        env = g.new_episode()
        await env.reset(
            "Who is older, Scott Derrickson or Ed Wood?",
            {"golden_answers": ["Ed Wood"], "type": "comparison"},
        )
        s1 = await env.step("I will just guess")
        assert s1.observation == INVALID_FEEDBACK and not s1.done and s1.next_final
        s2 = await env.step("<think> t </think><search> Ed Wood </search>")  # searching is disabled now
        return s2

    s2 = asyncio.run(episode())
    assert s2.done and s2.output["status"] == "unanswered" and s2.output["search_rounds"] == 0
    reward = g.score(s2.episode, {"golden_answers": ["Ed Wood"], "type": "comparison"})
    assert not reward.format_valid and reward.outcome == 0


def test_env_rejects_misuse(hotpot_store):
    g = EnvGraph(hotpot_store)
    env = g.new_episode()
    with pytest.raises(RuntimeError, match="reset"):
        asyncio.run(env.step("<answer> x </answer>"))
    with pytest.raises(ValueError, match="non-empty question"):
        asyncio.run(env.reset("  "))
    with pytest.raises(ValueError, match="reward mode"):
        EnvGraph(hotpot_store, reward_mode="nope")
    with pytest.raises(ValueError, match="choose one of parallel, sequential"):
        EnvGraph(hotpot_store, graph="rag")


def test_concurrent_episodes_are_isolated(hotpot_store, hotpot_questions, tmp_path):
    from parallelsearch.agents.policies import OraclePolicy

    g = EnvGraph(hotpot_store)
    qs = hotpot_questions[:12]
    summary = asyncio.run(
        rollout(
            qs,
            g,
            OraclePolicy(),
            tmp_path / "ep.jsonl",
            concurrency=6,
            sft_out=tmp_path / "sft.jsonl",
            allow_oracle=True,
            progress=False,
        )
    )
    import json

    rows = [json.loads(x) for x in (tmp_path / "ep.jsonl").read_text().splitlines()]
    assert summary.failures == 0 and len(rows) == 12
    for row in rows:
        q = next(x for x in qs if x["id"] == row["id"])
        assert q["question"] in row["prompt"] and row["text"].startswith(row["prompt"])
        assert row["reward"]["total"] == pytest.approx(
            score_trajectory(row["text"], label_of(q), prompt=row["prompt"]).total
        )
    d = summary.to_dict()
    assert d["decomposition_ratio_parallel"] == 1.0 and d["format_valid_pct"] == 100.0
    sft = [json.loads(x) for x in (tmp_path / "sft.jsonl").read_text().splitlines()]
    assert len(sft) == summary.sft_written
    assert all(
        s["messages"][-1]["role"] == "assistant" and "</answer>" in s["messages"][-1]["content"] for s in sft
    )
