"""The reward's parts come from one list (rl/rewards.py's REWARD_PARTS): the executor's
``extra_logs``, rollout's summary and the smokes' reports derive their keys from it, so a new
part reaches every log by editing rl/rewards.py. The over-search part (a penalty per sub-query
beyond the sub-questions a question needs) is off in the ``paper`` preset and on in
``paper-oversearch``."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from parallelsearch.rl import score_trajectory
from parallelsearch.rl.rewards import REWARD_PARTS, needed_subqueries
from parallelsearch.rl.train_config import PRESETS, load_train_config

ROOT = Path(__file__).resolve().parents[1]
CHAT = "<|im_start|>user\nQuestion: Who is older?<|im_end|>\n<|im_start|>assistant\n"
INFO = "\n\n<information>Doc 1(Title: Monet) born 1840</information>\n\n"
PAR = {"golden_answers": ["Camille Pissarro"], "type": "comparison"}


def searched(*queries: str) -> str:
    """An episode of one search per item of ``queries`` (each may hold ``##`` sub-queries), then the answer."""
    turns = "".join(f"<think> t </think><search> {q} </search>{INFO}" for q in queries)
    return turns + "<think> done </think><answer> Camille Pissarro </answer>"


def test_no_consumer_names_a_part_by_hand():
    """A part spelled in a consumer (``reward_outcome``, ``"search_count"``) would miss a new part."""
    consumers = [
        ROOT / "rl" / "executor.py",
        ROOT / "rl" / "rollout.py",
        *(ROOT / "parallelsearch" / "smoke").glob("*.py"),
    ]
    spelled = re.compile(
        r"reward_(outcome|decomposition|search_count|format)\b|\(\"outcome\", \"decomposition\""
    )
    hits = [
        f"{p.name}:{n}"
        for p in consumers
        for n, line in enumerate(p.read_text().splitlines(), 1)
        if spelled.search(line)
    ]
    assert not hits, hits


def test_every_consumer_reports_every_part():
    from parallelsearch.rl.rollout import RolloutSummary
    from parallelsearch.training.one_step import SmokeEpisode, format_episode
    from parallelsearch.training.rollouts import TERMS

    assert {f"reward_{p}" for p in REWARD_PARTS} <= set(TERMS)
    r = score_trajectory(
        CHAT + searched("Monet birth ## Pissarro birth ## Sisley birth"), PAR, "paper", lambda_o=0.05
    )
    summary = RolloutSummary()
    summary.add({"reward": r.to_dict(), "subqueries": 3, "search_errors": 0, "policy_calls": 2})
    assert list(summary.to_dict()["mean_parts"]) == list(REWARD_PARTS)
    assert "over_search -0.05" in summary.lines()[1]
    terms = {f"reward_{k}": v for k, v in r.parts().items()} | dict.fromkeys(
        ("format_valid", "search_rounds", "subqueries", "search_errors"), 0.0
    )
    line = format_episode(1, SmokeEpisode("q?", r.total, terms, 1, 1, 1, 1, "ok", False, []))[1]
    assert " + over_search -0.05" in line


@pytest.mark.parametrize("mode", ["paper", "official", "dag"])
def test_over_search_costs_each_unneeded_subquery_only_when_weighted(mode):
    wide = (CHAT if mode == "official" else "") + searched(
        "Monet birth ## Pissarro birth ## Sisley birth ## Manet birth"
    )
    if mode == "official":  # the official reward reads the prompt's two example searches first
        wide = (
            CHAT.replace("Question:", "<search> x </search><search> y </search> Question:")
            + wide[len(CHAT) :]
        )
    off = score_trajectory(wide, PAR, mode)
    on = score_trajectory(wide, PAR, mode, lambda_o=0.05)
    assert off.needed_subqueries == 2 and off.unneeded_subqueries == 2  # 4 sub-queries, 2 needed
    assert off.over_search == 0.0 and "lambda_o" not in off.weights
    assert on.over_search == pytest.approx(-0.10) and on.total == pytest.approx(off.total - 0.10)
    assert on.parts() == {**off.parts(), "over_search": on.over_search}
    assert on.total == pytest.approx(sum(on.parts().values()))
    two = score_trajectory(wide.replace(" ## Sisley birth ## Manet birth", ""), PAR, mode, lambda_o=0.05)
    assert two.unneeded_subqueries == 0 and two.over_search == 0.0


def test_the_subquestions_a_question_needs():
    assert needed_subqueries({"golden_answers": ["a"]}) == 1
    assert needed_subqueries({"golden_answers": ["a"], "type": "bridge"}) == 2
    assert needed_subqueries({"golden_answers": ["a"], "supporting_titles": ["A", "B", "C", "A"]}) == 3
    assert (
        needed_subqueries({"golden_answers": ["a"], "hops": [{"refs": []}, {"refs": [1]}, {"refs": [2]}]})
        == 3
    )


def test_the_paper_preset_leaves_it_off_and_the_oversearch_preset_turns_it_on(tmp_path):
    from conftest import fill_batch

    from parallelsearch.cli import main
    from parallelsearch.data import load_questions
    from parallelsearch.demo_data import HOTPOTQA_SAMPLE
    from parallelsearch.rl.data import train_record
    from parallelsearch.rl.openrlhf_cli import check_command
    from parallelsearch.rl.openrlhf_command import openrlhf_args

    assert "lambda_o" not in PRESETS["paper"]().agent.reward.weights
    cfg = load_train_config(preset="paper-oversearch")
    assert cfg.agent.reward.weights == {"lambda_o": 0.05}
    assert cfg.agent.reward.mode == PRESETS["paper"]().agent.reward.mode == "paper-strict"
    check_command(openrlhf_args(cfg))
    assert "lambda_o: 0.05" in cfg.agent_config_yaml()
    tuned = load_train_config(preset="paper-oversearch", overrides=["agent.reward.weights.lambda_o=0.1"])
    assert tuned.agent.reward.weights == {"lambda_o": 0.1}
    data = tmp_path / "train.jsonl"  # the dry run runs train --check's checks: they read the prompts
    data.write_text("".join(json.dumps(train_record(q)) + "\n" for q in load_questions(HOTPOTQA_SAMPLE)[:8]))
    dry = ["train", "--preset", "paper-oversearch", "--dry-run", "--skip-probe"]
    assert main([*dry, "--set", f"prompt_data={fill_batch(data)}"]) == 0
    with pytest.raises(ValueError, match=r"unknown reward weight 'lambda_oo'.*did you mean 'lambda_o'"):
        load_train_config(preset="paper", overrides=["agent.reward.weights.lambda_oo=0.1"])


def test_labels_carry_the_supporting_titles():
    from parallelsearch.rl.data import label_of

    q = {
        "id": "1",
        "question": "q",
        "golden_answers": ["a"],
        "metadata": {"type": "bridge", "supporting_titles": ["A", "B"]},
    }
    assert label_of(q)["supporting_titles"] == ["A", "B"] and needed_subqueries(label_of(q)) == 2
