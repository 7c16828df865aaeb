"""Launcher, training data and rollout CLIs; every generated flag is checked by OpenRLHF's own parser."""

from __future__ import annotations

import json

import pytest
from conftest import RAW, UvicornThread, fill_batch, needs_data

from parallelsearch.cli import main
from parallelsearch.rl.openrlhf_cli import build_parser, check_command
from parallelsearch.rl.openrlhf_command import openrlhf_args
from parallelsearch.rl.train_config import TrainConfig, load_train_config, paper_preset


def test_paper_preset_passes_openrlhf_parser_and_checks():
    cfg = paper_preset()
    args = check_command(openrlhf_args(cfg))
    assert args.actor.model_name_or_path == "Qwen/Qwen2.5-7B-Instruct"
    assert args.algo.advantage.estimator == "gae" and args.critic.model_name_or_path == cfg.model
    assert args.actor.adam.lr == 1e-6 and args.critic.adam.lr == 1e-5
    assert args.algo.kl.init_coef == 0.001 and args.rollout.batch_size == 512 and args.train.batch_size == 256
    assert args.rollout.max_new_tokens == 500 and args.data.max_len == 6196
    assert args.train.agent_func_path.endswith("openrlhf_agent.py") and args.reward.remote_url == ["agent"]
    assert args.data.input_key == "prompt" and args.data.label_key == "label"
    assert args.train.colocate_all and args.vllm.num_engines == 8


@pytest.mark.parametrize(
    "overrides",
    [
        {"algorithm": "reinforce_baseline", "n_samples_per_prompt": 4},
        {
            "algorithm": "group_norm",
            "n_samples_per_prompt": 8,
            "dynamic_filtering": True,
            "dynamic_filtering_range": [0.1, 0.9],
        },
        {"algorithm": "rloo", "n_samples_per_prompt": 4, "use_kl_loss": True, "kl_estimator": "k3"},
        {
            "async_train": True,
            "colocate_all": False,
            "resume": True,
            "tensorboard_dir": "/tmp/tb",
            "wandb_project": None,
        },
        {
            "apply_chat_template": True,
            "eval_data": "eval.jsonl",
            "vllm_tensor_parallel_size": 2,
            "vllm_num_engines": 4,
        },
    ],
)
def test_every_variant_is_accepted_by_openrlhf(overrides):
    cfg = paper_preset(**overrides)
    args = check_command(openrlhf_args(cfg))
    assert args.algo.advantage.estimator == cfg.algorithm
    if cfg.algorithm != "gae":
        assert args.critic.model_name_or_path is None
        assert "--critic.adam.lr" not in openrlhf_args(cfg)
    flags = [a for a in openrlhf_args(cfg) if a.startswith("--")]
    known = {opt for action in build_parser()._actions for opt in action.option_strings}
    assert set(flags) <= known


def test_openrlhf_checks_catch_what_the_parser_allows():
    with pytest.raises(ValueError, match="unrecognized arguments: --no.such"):
        check_command(["--no.such", "1"])
    with pytest.raises(ValueError, match="n_samples_per_prompt > 1"):
        check_command(
            [
                "--actor.model_name_or_path",
                "m",
                "--algo.advantage.estimator",
                "rloo",
                "--train.agent_func_path",
                "a.py",
            ]
        )


def test_config_validation_names_the_field(tmp_path):
    with pytest.raises(ValueError, match="n_samples_per_prompt: algorithm group_norm needs >= 2"):
        paper_preset(algorithm="group_norm")
    with pytest.raises(ValueError, match="preset paper is invalid: lr_typo"):
        load_train_config(preset="paper", overrides=["lr_typo=1"])
    f = tmp_path / "train.yaml"
    f.write_text(
        "model: m\nprompt_data: d.jsonl\nagent:\n  retriever_url: http://h:8000/retrieve\n  reward:\n    mode: official\n"
    )
    cfg = load_train_config(
        f, overrides=["agent.graph_config.top_k=5", "rollout_batch_size=128", "train_batch_size=64"]
    )
    assert (
        isinstance(cfg, TrainConfig)
        and cfg.agent.graph_config.top_k == 5
        and cfg.agent.reward.mode == "official"
    )
    check_command(openrlhf_args(cfg))


def test_train_dry_run_cli(capsys, tmp_path):
    from parallelsearch.data import load_questions
    from parallelsearch.demo_data import HOTPOTQA_SAMPLE
    from parallelsearch.rl.data import train_record

    data = tmp_path / "train.jsonl"
    records = [train_record(q, template="official") for q in load_questions(HOTPOTQA_SAMPLE)[:4]]
    data.write_text("".join(json.dumps(r) + "\n" for r in records))
    argv = ["train", "--preset", "paper", "--dry-run", "--skip-probe", "--set", "model=/models/qwen"]
    # the dry run runs the checks of train --check: a prompt file that is not there stops it
    assert main(argv) == 2
    assert "data/nq_hotpotqa_train/train.jsonl does not exist" in capsys.readouterr().err
    assert main([*argv, "--set", f"prompt_data={fill_batch(data)}"]) == 0
    out = capsys.readouterr().out
    assert "checked against OpenRLHF's own parser" in out
    assert "ray job submit" in out and "PARALLELSEARCH_AGENT_CONFIG" in out
    assert "--actor.model_name_or_path /models/qwen" in out
    assert "retriever_url: http://127.0.0.1:8000/retrieve" in out
    assert main(["train", "--preset", "paper", "--dry-run", "--set", "algorithm=bogus"]) == 2


@needs_data
def test_make_train_data_cli(tmp_path, capsys):
    nq = RAW / "nq" / "GaurisankarJ_reason_over_search" / "test.jsonl"
    hp = RAW / "hotpotqa" / "hahahajw_Agentic-RAG" / "HotpotQA_500_benchmark.json"
    bam = RAW / "bamboogle" / "GaurisankarJ_reason_over_search" / "test.jsonl"
    out = tmp_path / "train.jsonl"
    # test and dev files stand in for the train splits here (none on this machine): allowed explicitly
    argv = ["make-train-data", str(nq), str(hp), str(bam), "--recipe", "paper", "--out", str(out)]
    assert main(argv) == 2 and "comes from an evaluation file" in capsys.readouterr().err
    assert main([*argv, "--allow-eval-questions"]) == 0
    text = capsys.readouterr().out
    assert "by dataset: hotpotqa 500, nq 1000" in text and "left out 125 bamboogle" in text
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    assert len(rows) == 1500 and len({r["id"] for r in rows}) == 1500
    label = json.loads(rows[0]["label"])
    assert set(label) >= {"golden_answers", "type", "split", "id", "question"}
    assert rows[0]["prompt"].endswith(f"Question: {label['question']}\n") and label["question"].endswith("?")
    types = {json.loads(r["label"])["type"] for r in rows}
    assert types == {"na", "comparison", "bridge"}


def test_make_train_data_refuses_holdout(tmp_path):
    holdout = tmp_path / "holdout" / "hotpotqa" / "x.jsonl"
    holdout.parent.mkdir(parents=True)
    holdout.write_text("")
    assert main(["make-train-data", str(holdout), "--out", str(tmp_path / "t.jsonl")]) == 2


@needs_data
def test_rollout_cli_over_retrieve_server(hotpot_store, hotpot_comparison_file, tmp_path, capsys):
    from parallelsearch.stores import create_retrieval_app

    with UvicornThread(create_retrieval_app(hotpot_store)) as srv:
        rc = main(
            [
                "rollout", "--data", str(hotpot_comparison_file), "--policy", "oracle", "--retriever", srv.url,
                "--out", str(tmp_path / "ep.jsonl"), "--sft-out", str(tmp_path / "sft.jsonl"), "--limit", "6",
                "--allow-oracle", "--summary-json", str(tmp_path / "s.json"),
            ]
        )  # fmt: skip
    assert rc == 0
    out = capsys.readouterr().out
    assert "episodes 6, failures 0" in out and "decomposition ratio" in out
    summary = json.loads((tmp_path / "s.json").read_text())
    assert summary["episodes"] == 6 and summary["format_valid_pct"] == 100.0
    rows = [json.loads(x) for x in (tmp_path / "ep.jsonl").read_text().splitlines()]
    assert all(r["reward"] and r["turns"] and r["policy_calls"] >= 2 for r in rows)
