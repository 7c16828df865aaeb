"""A run's health while it goes: the executor's ``extra_logs`` per question class and over-search,
its per-episode records (``agent.health_log``), the per-step summary and the alarms, which fire on
a collapsed run's records and stay quiet on a healthy one's."""

from __future__ import annotations

import asyncio
import json
import random

import pytest
import yaml
from conftest import UvicornThread, needs_data
from engines import SamplingParamsStandIn, ScriptedEngine, load_like_openrlhf

from parallelsearch.cli import main
from parallelsearch.rl.data import train_record
from parallelsearch.rl.health import AlarmThresholds, read_steps, step_health, with_alarms, write_record


def record(step: int, group: int, *, cls="parallel", reward=1.0, decomposed=1.0, tokens=120.0, over=0.0):
    return {
        "time": step * 1000.0 + group,
        "group": f"g{step}-{group // 4}",
        "class": cls,
        "reward": reward,
        "decomposed": decomposed,
        "rounds": 1.0,
        "subqueries": 2.0 if decomposed else 1.0,
        "over_search": over,
        "response_tokens": tokens,
        "format_valid": 1.0,
        "truncated": 0.0,
    }


def run(collapse: bool, steps: int = 6, per_step: int = 16, seed: int = 0) -> list[dict]:
    """Records of a run: healthy (decomposition near 60%, rewards that differ within groups, steady
    length), or collapsing from step 3 (nobody decomposes, every group scores the same, responses shrink)."""
    rng = random.Random(seed)
    out = []
    for step in range(1, steps + 1):
        bad = collapse and step >= 3
        for i in range(per_step):
            out.append(
                record(
                    step,
                    i,
                    reward=0.2 if bad else rng.choice([0.2, 1.0, 1.8]),
                    decomposed=0.0 if bad else float(rng.random() < 0.6),
                    tokens=40.0 if bad else 110.0 + rng.random() * 20,
                )
            )
    return out


def steps_of(records, per_step=16):
    chunks = [records[i : i + per_step] for i in range(0, len(records), per_step)]
    return with_alarms([step_health(c, n) for n, c in enumerate(chunks, 1)])


def test_a_collapsed_run_fires_the_alarms_and_a_healthy_one_does_not():
    for seed in range(5):
        assert not any(s.alarms for s in steps_of(run(False, seed=seed))), seed
    steps = steps_of(run(True))
    assert [bool(s.alarms) for s in steps] == [False, False, False, True, True, True]  # patience 2
    kinds = {a.split(":")[0] for a in steps[3].alarms}
    assert kinds == {"decomposition collapse", "reward variance collapse", "length collapse"}
    assert steps[3].by_class["parallel"].decomposition_rate == 0.0 and steps[3].equal_groups == 1.0
    # one bad step alone does not fire
    one_bad = run(False)[:32] + run(True)[32:48] + run(False)[48:]
    assert not any(s.alarms for s in steps_of(one_bad))
    # a run that never decomposed has nothing to collapse from
    never = [dict(r, decomposed=0.0) for r in run(False)]
    assert not any("decomposition" in a for s in steps_of(never) for a in s.alarms)
    strict = AlarmThresholds(patience=1)
    assert with_alarms(steps_of(run(True)), strict)[2].alarms


def test_the_summary_reads_each_class_and_the_over_search():
    records = [record(1, i) for i in range(4)] + [
        record(1, 4, cls="sequential", decomposed=0.0, over=1.0, reward=0.0),
        record(1, 5, cls="sequential", decomposed=0.0, reward=1.0),
        record(1, 8, cls="single", decomposed=0.0),
    ]
    s = step_health(records, 1)
    assert (
        s.by_class["parallel"].decomposition_rate == 1.0
        and s.by_class["parallel"].subqueries_per_round == 2.0
    )
    assert s.by_class["sequential"].episodes == 2 and s.by_class["single"].episodes == 1
    assert s.over_search == pytest.approx(1 / 7) and s.over_search_share == pytest.approx(1 / 7)
    assert s.equal_groups == pytest.approx(0.5)  # g1-0 all 1.0; g1-1 (sequential + parallel) differs
    assert s.line().startswith("health step 1: 7 episodes; parallel 4: decomposed 100%, rounds 1.00")


def test_train_health_prints_steps_and_exits_1_on_an_alarm(tmp_path, capsys):
    for name, collapse in (("healthy", False), ("collapsed", True)):
        for i, rec in enumerate(run(collapse)):
            write_record(tmp_path / name, rec)
            if i % 2:  # a second actor's file
                (tmp_path / name / f"actor2-{i}.jsonl").write_text("")
    assert main(["train-health", str(tmp_path / "healthy"), "--episodes-per-step", "16"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 6 and all(x.startswith("health step ") for x in out)
    assert main(["train-health", str(tmp_path / "collapsed"), "--episodes-per-step", "16"]) == 1
    out = capsys.readouterr().out
    assert "  ALARM decomposition collapse: parallelizable questions decomposed 0%" in out
    assert "  ALARM length collapse: responses 40 tokens" in out
    assert main(["train-health", str(tmp_path / "collapsed"), "--episodes-per-step", "16", "--json"]) == 1
    rows = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert rows[3]["alarms"] and rows[0]["by_class"]["parallel"]["episodes"] == 16
    assert main(["train-health", str(tmp_path / "nothing"), "--episodes-per-step", "16"]) == 2
    assert "is not a folder" in capsys.readouterr().err


@needs_data
def test_the_executor_logs_health_and_writes_one_record_per_episode(
    hotpot_store, hotpot_questions, tiny_lm, tmp_path, monkeypatch
):
    from parallelsearch.rl.agent_config import ENV_VAR
    from parallelsearch.stores import create_retrieval_app

    _, tok = tiny_lm
    q = next(x for x in hotpot_questions if x["metadata"].get("type") == "comparison")
    a, b = q["metadata"]["supporting_titles"][:2]
    rec = train_record(q)
    with UvicornThread(create_retrieval_app(hotpot_store)) as srv:
        cfg = {
            "retriever_url": f"{srv.url}/retrieve",
            "graph_config": {"top_k": 1, "max_turns": 3, "max_new_tokens": 64},
            "health_log": str(tmp_path / "health"),
        }
        (tmp_path / "agent.yaml").write_text(yaml.safe_dump(cfg))
        monkeypatch.setenv(ENV_VAR, str(tmp_path / "agent.yaml"))
        executor = load_like_openrlhf()
        answer = f"<think> compare </think><answer> {q['golden_answers'][0]} </answer>"
        results = [
            asyncio.run(
                executor.execute(
                    rec["prompt"],
                    rec["label"],
                    SamplingParamsStandIn(),
                    4096,
                    tok,
                    ScriptedEngine(tok, turns),
                )
            )
            for turns in (
                [f"<think> two </think><search> {a} ## {b} ## {a} born </search>", answer],
                [f"<think> one </think><search> {a} </search>", answer],
            )
        ]
    logs = [{k: float(v) for k, v in r["extra_logs"].items()} for r in results]
    assert logs[0]["class_parallel"] == 1.0 and logs[0]["class_single"] == 0.0
    assert logs[0]["decomposed_parallel"] == 1.0 and logs[0]["subqueries_parallel"] == 3.0
    assert logs[0]["over_search"] == 1.0 and logs[1]["over_search"] == 0.0  # two supporting titles needed
    assert logs[0]["reward_over_search"] == 0.0  # off unless weighted
    assert logs[1]["decomposed_parallel"] == 0.0 and logs[0]["response_tokens"] > 0
    (step,) = read_steps(tmp_path / "health", 2)
    assert step.episodes == 2 and step.by_class["parallel"].decomposition_rate == 0.5
    assert step.by_class["parallel"].subqueries_per_round == 2.0 and step.equal_groups is not None
    assert step.over_search == 0.5 and not step.alarms
