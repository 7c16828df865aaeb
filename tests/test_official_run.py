"""The paper preset is the official run (train_parallelsearch.sh): its step count and warm-up, its
1,000-token observation cap, its validation; ``--set`` takes any flag OpenRLHF 0.11.2's parser
knows; the dry run, ``--runner print`` and ``command.sh`` run the checks of ``train --check``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from parallelsearch.cli import main
from parallelsearch.data import load_questions
from parallelsearch.demo_data import HOTPOTQA_SAMPLE
from parallelsearch.rl.data import make_train_data, train_record
from parallelsearch.rl.episode import TokenLedger
from parallelsearch.rl.openrlhf_cli import check_command
from parallelsearch.rl.openrlhf_command import openrlhf_args
from parallelsearch.rl.preflight_data import check_contamination
from parallelsearch.rl.schedule import plan, schedule_line
from parallelsearch.rl.train_config import load_train_config, paper_preset

#: the official NQ + HotpotQA training file's records (PeterJinGo/nq_hotpotqa_train)
OFFICIAL_PROMPTS = 169_615


@pytest.fixture()
def prompts(tmp_path):
    """A prompt file of a few real records repeated to one rollout batch (the run's checks read
    them, and refuse a file smaller than a batch)."""
    from conftest import fill_batch

    data = tmp_path / "train.jsonl"
    recs = [train_record(q, template="official") for q in load_questions(HOTPOTQA_SAMPLE)[:8]]
    data.write_text("".join(json.dumps(r) + "\n" for r in recs))
    return fill_batch(data)


def test_the_preset_runs_the_official_length_and_warm_up(tmp_path):
    big = tmp_path / "train.jsonl"
    big.write_text('{"prompt": "p", "label": "{}"}\n' * OFFICIAL_PROMPTS)
    cfg = paper_preset(prompt_data=str(big))
    assert cfg.total_training_steps == 1005 and cfg.lr_scheduler == "constant_with_warmup"
    # 332 rollout steps a pass: 3 whole passes (996 steps) come closest to 1005
    s = plan(cfg)
    assert (s.steps_per_episode, s.episodes, s.steps) == (332, 3, 996)
    args = check_command(openrlhf_args(cfg))  # OpenRLHF's own parser and checks
    assert args.train.num_episodes == 3 and args.actor.lr_scheduler == "constant_with_warmup"
    assert args.actor.lr_warmup_ratio == 0.285 and args.critic.lr_scheduler == "constant_with_warmup"
    line = schedule_line(cfg, s)
    assert "332 rollout steps a pass x 3 passes = 996 steps for total_training_steps 1005" in line
    # 0.285 of 1986 optimizer steps (2 a rollout step) = 567, about 284 rollout steps (verl: 286)
    assert "= 567 (about 284 rollout steps)" in line
    # num_episodes is derived: giving it too is refused, naming the way out
    with pytest.raises(ValueError, match="set total_training_steps=null to give num_episodes"):
        load_train_config(preset="paper", overrides=["num_episodes=5"])
    own = load_train_config(preset="paper", overrides=["total_training_steps=null", "num_episodes=5"])
    assert plan(own).episodes == 5


def test_the_preset_optimises_as_the_official_run(prompts):
    """verl's defaults under the official script: entropy_coeff 0.001, AdamW betas (0.9, 0.999) and
    weight decay 0.01 (actor and critic); OpenRLHF's own are no entropy term, (0.9, 0.95) and 0."""
    args = check_command(openrlhf_args(paper_preset(prompt_data=str(prompts))))  # OpenRLHF's own parser
    assert args.actor.entropy_coef == 0.001
    for role in (args.actor, args.critic):
        assert tuple(role.adam.betas) == (0.9, 0.999) and role.adam.weight_decay == 0.01
    off = load_train_config(preset="paper", overrides=[f"prompt_data={prompts}", "entropy_coef=null"])
    assert check_command(openrlhf_args(off)).actor.entropy_coef is None
    by_flag = load_train_config(preset="paper", overrides=["actor.adam.betas=[0.9, 0.95]"])
    assert by_flag.adam_betas == (0.9, 0.95)


def test_the_preset_caps_observations_and_validates_as_the_official_run(prompts):
    cfg = paper_preset(prompt_data=str(prompts), eval_data=str(prompts))
    assert cfg.agent.max_observation_tokens == 1000 and cfg.eval_steps == 100
    args = check_command(openrlhf_args(cfg))
    assert args.eval.steps == 100 and args.eval.temperature == 0.0 and args.eval.n_samples_per_prompt == 1
    assert "max_observation_tokens: 1000" in cfg.agent_config_yaml()


def test_train_check_counts_observations_at_their_cap_in_text_mode(prompts, capsys):
    """top_k 5 x 8 sub-queries of 160-token passages would overflow max_len 6196, but the executor cuts
    each observation to 1,000 tokens; the gateway renders the agent's tool messages whole."""
    argv = ["train", "--preset", "paper", "--check", "--skip-probe", "--set", f"prompt_data={prompts}"]
    assert main([*argv, "--set", "agent.graph_config.top_k=5"]) == 0
    capsys.readouterr()
    assert (
        main([*argv, "--set", "agent.graph_config.top_k=5", "--set", "agent.max_observation_tokens=null"])
        == 1
    )
    assert "observation max_subqueries 8 x 5 passage(s)" in capsys.readouterr().out


def test_an_observation_is_cut_at_its_token_cap(tiny_lm):
    _, tok = tiny_lm
    ledger = TokenLedger(tok, "Question: q?\n", observation_cap=5)
    ledger.add_observation("<information>" + " word" * 50 + "</information>")
    assert len(ledger.ids) - ledger.prompt_len == 5 and ledger.observations_cut == 1
    uncapped = TokenLedger(tok, "Question: q?\n")
    uncapped.add_observation("<information>" + " word" * 50 + "</information>")
    assert len(uncapped.ids) - uncapped.prompt_len > 5 and uncapped.observations_cut == 0


def test_set_takes_any_flag_openrlhfs_parser_knows(prompts):
    cfg = load_train_config(
        preset="paper",
        overrides=[f"prompt_data={prompts}", "actor.aux_loss_coef=0.01", "--actor.max_norm=0.5"],
    )
    assert cfg.openrlhf_flags["actor.aux_loss_coef"] == 0.01
    args = check_command(openrlhf_args(cfg))
    assert args.actor.aux_loss_coef == 0.01 and args.actor.max_norm == 0.5
    with pytest.raises(ValueError, match=r"--set actor\.entropy_coeff: unknown key"):
        load_train_config(preset="paper", overrides=["actor.entropy_coeff=0.001"])
    # a flag OpenRLHF knows with a value its parser refuses fails the check that runs its parser
    bad = load_train_config(preset="paper", overrides=[f"prompt_data={prompts}", "actor.max_norm=lots"])
    with pytest.raises(ValueError, match="OpenRLHF's parser rejects the command"):
        check_command(openrlhf_args(bad))


def test_dry_run_and_runner_print_refuse_what_check_refuses(tmp_path, prompts, capsys):
    broken = ["--set", f"prompt_data={tmp_path / 'missing.jsonl'}"]
    for how in (["--check"], ["--dry-run"], ["--runner", "print", "--set", f"job_dir={tmp_path / 'j'}"]):
        code = main(["train", "--preset", "paper", "--skip-probe", *how, *broken])
        out = capsys.readouterr()
        assert code != 0 and "missing.jsonl does not exist" in out.out + out.err, how
    assert not (tmp_path / "j").exists()
    ok = ["train", "--preset", "paper", "--skip-probe", "--set", f"prompt_data={prompts}"]
    assert main([*ok, "--dry-run"]) == 0
    assert "# check: run length: 512 prompts" in capsys.readouterr().out


def test_command_sh_runs_the_checks_before_submitting(tmp_path, prompts, capsys):
    job = tmp_path / "job"
    argv = ["train", "--preset", "paper", "--runner", "print", "--skip-probe", "--set", f"job_dir={job}"]
    assert main([*argv, "--set", f"prompt_data={prompts}"]) == 0
    capsys.readouterr()
    script = (job / "command.sh").read_text()
    assert (
        '"${PARALLELSEARCH_CLI:-parallelsearch}" train --config train_config.yaml --check --skip-probe'
        in script
    )
    # the job's prompt file broken after the fact: command.sh stops at the check, before `ray`
    (job / "data" / "train.jsonl").write_text("")
    from test_rl_job import standins

    cli = str(Path(sys.executable).with_name("parallelsearch"))  # this environment's console script
    log = tmp_path / "standin.log"
    path = f"{standins(tmp_path)}:{os.environ['PATH']}"  # `ray` a stand-in that records a call
    env = {**os.environ, "PARALLELSEARCH_CLI": cli, "PATH": path, "STANDIN_LOG": str(log)}
    env.pop("PARALLELSEARCH_SKIP_CHECK", None)
    res = subprocess.run(
        ["bash", str(job / "command.sh")], env=env, capture_output=True, text=True, timeout=120
    )
    assert res.returncode != 0 and "check failed" in res.stdout and not log.exists()
    assert (
        subprocess.run(
            ["bash", str(job / "command.sh")], env={**env, "PARALLELSEARCH_SKIP_CHECK": "1"}
        ).returncode
        == 0
    )
    assert log.exists()  # skipped, the script goes on to `ray job submit`


def test_a_file_with_questions_from_evaluation_files_says_so(tmp_path):
    source = tmp_path / "nq_test.jsonl"
    qs = [
        {
            "id": str(i),
            "question": f"who wrote book {i}",
            "golden_answers": ["someone"],
            "metadata": {"dataset": "nq"},
        }
        for i in range(5)
    ]
    source.write_text("".join(json.dumps(q) + "\n" for q in qs))
    made = tmp_path / "train.jsonl"
    with pytest.raises(ValueError, match="comes from an evaluation file"):
        make_train_data([source], made)
    make_train_data([source], made, allow_eval_questions=True)
    line = check_contamination(str(made), None, "prompt", "label")
    assert "no evaluation ids" not in line
    assert "5 record(s) from evaluation files, written with make-train-data --allow-eval-questions" in line
    assert "its file name says 'test'" in line
